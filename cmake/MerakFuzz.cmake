# MERAK_FUZZ=ON: a build for the libFuzzer targets in fuzz/. Every file of
# the project is compiled with coverage for the fuzzer and with AddressSanitizer
# and UndefinedBehaviorSanitizer, so a fuzz target finds overflows in the
# library code it calls, not only in itself. The targets link libFuzzer's
# driver (-fsanitize=fuzzer); everything else links the sanitizer runtimes.
# Needs clang (Debian: clang-19 and libclang-rt-19-dev; scripts/fuzz.sh
# installs and configures them).

if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang" OR
   NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "MERAK_FUZZ needs clang (libFuzzer): configure with "
    "-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19, or run "
    "scripts/fuzz.sh")
endif()

# vptr checks need RTTI, which the MLIR side is built without; the rest of
# -fsanitize=undefined applies everywhere. Line tables keep the reports
# symbolized at little build cost.
set(MERAK_SANITIZE_FLAGS
  -fsanitize=address,undefined -fno-sanitize=vptr
  -fno-omit-frame-pointer -gline-tables-only)
add_compile_options(-fsanitize=fuzzer-no-link ${MERAK_SANITIZE_FLAGS})
add_link_options(-fsanitize=address,undefined -fno-sanitize=vptr)
