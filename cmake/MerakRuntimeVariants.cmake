# The runtime built alone, as a machine that only trains builds it: once
# with MERAK_COMPILER=OFF (no MLIR or LLVM; the CPU backend and Gloo on
# LibTorch) and once with MERAK_CPU_BACKEND=OFF too (no LibTorch either,
# the CUDA backend where the toolkit is).
# Each is a configure of this same tree in its own directory, built with
# the main build; the tests in test/Runtime/runtime-only.test and the
# entries below check what they link and that they train a .mrp.
include(ExternalProject)

set(MERAK_RUNTIME_ONLY_DIR ${CMAKE_BINARY_DIR}/runtime-only)
set(MERAK_RUNTIME_MINIMAL_DIR ${CMAKE_BINARY_DIR}/runtime-minimal)

function(merak_runtime_variant name dir cpu cuda after)
  ExternalProject_Add(${name}
    # After the main build's own objects of the same files: with ccache,
    # the variant's compiles of them are hits.
    DEPENDS ${after}
    SOURCE_DIR ${CMAKE_SOURCE_DIR}
    BINARY_DIR ${dir}
    CMAKE_GENERATOR ${CMAKE_GENERATOR}
    CMAKE_ARGS -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
               -DMERAK_COMPILER=OFF -DMERAK_CPU_BACKEND=${cpu}
               -DMERAK_BUILD_RUNTIME_VARIANTS=OFF
               -DMERAK_CUDA=${cuda}
               -DMERAK_SANITIZE=${MERAK_SANITIZE}
    INSTALL_COMMAND ""
    # Rebuilt (incrementally) with every build of the main tree.
    BUILD_ALWAYS ON
    USES_TERMINAL_BUILD ON)
  add_test(NAME ${name}/MerakRuntimeTests
    COMMAND ${dir}/unittests/Runtime/MerakRuntimeTests)
endfunction()

# The CUDA backend is built into the minimal variant (what a GPU machine
# without this project's packages runs: scripts/gpu-bundle.sh) and not
# again into the other, which would only compile the same kernels twice.
set(minimal_after MerakRuntime)
if(TARGET MerakRuntimeCUDA)
  list(APPEND minimal_after MerakRuntimeCUDA)
endif()
merak_runtime_variant(merak-runtime-only ${MERAK_RUNTIME_ONLY_DIR} ON OFF
  "MerakRuntime;MerakRuntimeBuiltins")
merak_runtime_variant(merak-runtime-minimal ${MERAK_RUNTIME_MINIMAL_DIR} OFF
  ${MERAK_CUDA_BACKEND} "${minimal_after}")

# The CUDA backend on the CUDA emulator (lib/Runtime/CUDA/Emulation): the
# runtime alone, its CUDA kernels compiled as C++ and run on host threads,
# for the tests that check those kernels and the backend on this machine,
# which has no GPU (test/cuda/emulated/). It is built with AddressSanitizer
# and UndefinedBehaviorSanitizer, every report ending the process, so that
# a kernel's access outside its tensors or undefined arithmetic fails those
# tests (compute-sanitizer's memcheck where there is no GPU); at -O1, as
# scripts/sanitize.sh builds. Only its merak-kernel-check, merak-exec and
# the emulator's own unit tests are built: its other unit tests are the
# minimal variant's.
set(MERAK_RUNTIME_EMULATED_DIR ${CMAKE_BINARY_DIR}/runtime-emulated)
if(MERAK_CUDA_BACKEND)
  ExternalProject_Add(merak-runtime-emulated
    DEPENDS merak-runtime-minimal
    SOURCE_DIR ${CMAKE_SOURCE_DIR}
    BINARY_DIR ${MERAK_RUNTIME_EMULATED_DIR}
    CMAKE_GENERATOR ${CMAKE_GENERATOR}
    CMAKE_ARGS -DCMAKE_BUILD_TYPE=Release
               "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
               "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG"
               -DMERAK_COMPILER=OFF -DMERAK_CPU_BACKEND=OFF
               -DMERAK_BUILD_RUNTIME_VARIANTS=OFF
               -DMERAK_CUDA_EMULATION=ON
               -DMERAK_SANITIZE=address,undefined
               -DMERAK_SANITIZE_NO_RECOVER=ON
    BUILD_COMMAND ${CMAKE_COMMAND} --build . --target merak-kernel-check
                  merak-exec MerakCudaEmulatorTests
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON
    USES_TERMINAL_BUILD ON)
  add_test(NAME merak-runtime-emulated/MerakCudaEmulatorTests
    COMMAND ${MERAK_RUNTIME_EMULATED_DIR}/unittests/Runtime/MerakCudaEmulatorTests)
  set_tests_properties(merak-runtime-emulated/MerakCudaEmulatorTests
    PROPERTIES ENVIRONMENT
    "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/scripts/sanitizers/lsan.supp")
endif()
