#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) in build-fuzz/ ($MERAK_FUZZ_BUILD_DIR)
# with clang 19, ASan and UBSan, and runs each on its seed corpus for the
# given time. New inputs go to a scratch corpus in the build directory,
# never to fuzz/corpus. Prints per target the executions, exec/s, coverage
# and the outcome; exits non-zero when any target crashed, hung, leaked or
# ran out of memory (the input is kept under build-fuzz/fuzz-artifacts/).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   default: 60 seconds, every target (fuzz-safetensors fuzz-rank-program
#   fuzz-tokens fuzz-run-config fuzz-mlir fuzz-torchscript). docs/fuzzing.md
#   explains them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MERAK_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz-safetensors fuzz-rank-program fuzz-tokens fuzz-run-config
    fuzz-mlir fuzz-torchscript)
fi
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz.sh: seconds must be a number, not '$seconds'" >&2; exit 2 ;;
esac

bash "$root/scripts/install-deps.sh" --fuzz
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DMERAK_FUZZ=ON >/dev/null
fi
cmake --build "$build" --target "${targets[@]}" -- -j"$(nproc)"

export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-19/bin/llvm-symbolizer}"
# UBSan stops at the first report, as ASan does, so libFuzzer keeps the
# input; bugs reported and not fixed yet are suppressed (known-issues.supp).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/fuzz/known-issues.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

summary=()
failed=0
for t in "${targets[@]}"; do
  seeds="$root/fuzz/corpus/$t"
  scratch="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t"
  log="$build/fuzz-logs/$t.log"
  mkdir -p "$scratch" "$artifacts" "$(dirname "$log")"
  echo "fuzz: $t for ${seconds}s (log: $log)"
  rc=0
  # The scratch corpus comes first: libFuzzer adds what it finds there.
  "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$scratch" "$seeds" >"$log" 2>&1 </dev/null || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
  corpus=$(find "$scratch" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    outcome=ok
  else
    failed=1
    what=$(grep -o -m1 'ERROR: [A-Za-z]*Sanitizer: [a-z-]*\|ERROR: libFuzzer: [a-z -]*\|runtime error: .*' "$log" || true)
    outcome="FAILED (exit $rc${what:+: $what}); input: $(ls -t "$artifacts" | head -1)"
    tail -40 "$log" >&2
  fi
  summary+=("$(printf '%-18s %10s execs %8s exec/s  %-18s %5s new  %s' \
    "$t" "${execs:-?}" "${rate:-?}" "${cov:-cov: ?}" "$corpus" "$outcome")")
done

echo "fuzz summary (${seconds}s per target):"
printf '  %s\n' "${summary[@]}"
exit "$failed"
