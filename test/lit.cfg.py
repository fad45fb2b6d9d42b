# lit configuration of Merak's IR and import tests.
import os
import lit.formats

config.name = "MERAK"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["fixtures", "lit.cfg.py", "CMakeLists.txt", "Inputs", "README.md"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.merak_obj_root, "test")

path = os.pathsep.join([config.merak_tools_dir, config.llvm_tools_dir,
                        config.environment.get("PATH", os.environ["PATH"])])
# scripts/sanitize.sh runs a part of the suite with its sanitized
# merak-exec, ahead of this build's tools (merak-opt stays this build's).
sanitized_tools = os.environ.get("MERAK_SANITIZED_TOOLS_DIR")
if sanitized_tools:
    path = os.pathsep.join([sanitized_tools, path])
config.environment["PATH"] = path
# The kernels' libraries read these at load time: capping oneDNN's
# instruction set (DNNL_MAX_CPU_ISA=AVX2) or choosing OpenBLAS's kernels runs
# the suite as on a CPU without AVX-512. The references (python3-torch) see
# the same values.
for name in ("DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
# Compiled fused kernels are kept between runs under the user's cache
# directory (lib/Runtime/CUDA/KernelCache.h); tests keep none unless they
# name a directory of their own.
config.environment["MERAK_CACHE_DIR"] = "off"
config.substitutions.append(("%fixtures", config.fixtures_dir))
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%merak_src", config.merak_src_root))
config.substitutions.append(("%mlir_include", config.mlir_include_dir))
config.substitutions.append(("%llvm_tblgen", config.llvm_tblgen))
# merak-tokenize, where SentencePiece was found (scripts/install-deps.sh
# installs it).
if os.path.exists(os.path.join(config.merak_tools_dir, "merak-tokenize")):
    config.available_features.add("merak-tokenize")
# Headless Chromium (Debian's chromium) opens the HTML reports.
import shutil
if shutil.which("chromium") or shutil.which("chromium-browser"):
    config.available_features.add("chromium")
# The merak driver, where yaml-cpp was found.
if os.path.exists(os.path.join(config.merak_tools_dir, "merak")):
    config.available_features.add("merak-driver")
# The runtime built alone (cmake/MerakRuntimeVariants.cmake), where the
# build has it.
runtime_only_dir = getattr(config, "runtime_only_dir", "")
if runtime_only_dir and os.path.exists(
        os.path.join(runtime_only_dir, "bin", "merak-exec")):
    config.available_features.add("runtime-variants")
    config.substitutions.append(("%runtime_only", config.runtime_only_dir))
    config.substitutions.append(("%runtime_minimal",
                                 config.runtime_minimal_dir))
# The CUDA backend on the CUDA emulator (host threads, no GPU), where the
# build has it (cmake/MerakRuntimeVariants.cmake).
runtime_emulated_dir = getattr(config, "runtime_emulated_dir", "")
if runtime_emulated_dir and os.path.exists(
        os.path.join(runtime_emulated_dir, "bin", "merak-kernel-check")):
    config.available_features.add("cuda-emulator")
    config.substitutions.append(("%runtime_emulated", runtime_emulated_dir))
    # Its tools are built with ASan and UBSan: the leaks Debian's libraries
    # keep are the sanitizer step's suppressions.
    config.environment.setdefault(
        "LSAN_OPTIONS", "suppressions=" + os.path.join(
            config.merak_src_root, "scripts", "sanitizers", "lsan.supp"))
# The CUDA backend, where the build has it; `cuda-gpu` where this machine
# has a GPU it can use (never in CI: the tests that need one live in
# scripts/gpu-check.sh).
if getattr(config, "cuda_backend", "") == "ON":
    config.available_features.add("cuda-backend")
    # --comm=nccl: NCCL found beside the CUDA toolkit.
    if getattr(config, "nccl_library", ""):
        config.available_features.add("nccl")
    import subprocess
    try:
        if subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                          timeout=20).returncode == 0:
            config.available_features.add("cuda-gpu")
    except (OSError, subprocess.TimeoutExpired):
        pass
