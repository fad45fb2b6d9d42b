# Finds every dependency of the build and reports the optional ones.

find_program(MERAK_CCACHE ccache)
if(MERAK_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${MERAK_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${MERAK_CCACHE})
endif()

if(MERAK_COMPILER)
  # MLIR 19 and LLVM 19 from Debian (llvm-19-dev, libmlir-19-dev, mlir-19-tools).
  set(MERAK_LLVM_ROOT "/usr/lib/llvm-19" CACHE PATH "Root of the LLVM 19 install")
  find_package(MLIR REQUIRED CONFIG
    HINTS "${MERAK_LLVM_ROOT}/lib/cmake/mlir")
  if(NOT LLVM_VERSION_MAJOR EQUAL 19)
    message(FATAL_ERROR "Merak needs LLVM/MLIR 19, found ${LLVM_PACKAGE_VERSION}")
  endif()
  message(STATUS "Using MLIRConfig.cmake in: ${MLIR_DIR}")
  message(STATUS "Using LLVMConfig.cmake in: ${LLVM_DIR}")
  list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
  include(TableGen)
  include(AddLLVM)
  include(AddMLIR)
  include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
  add_definitions(${LLVM_DEFINITIONS})
  # Only the shared libMLIR.so / libLLVM.so are linked: mixing them with the
  # static component archives duplicates registrations.
  set(MERAK_MLIR_LIBS MLIR LLVM)

endif()

# LibTorch (libtorch-dev): the TorchScript importer, the CPU kernels, Gloo
# through c10d and reading .pt weights.
if(MERAK_COMPILER OR MERAK_CPU_BACKEND)
  find_package(Torch REQUIRED CONFIG)
  message(STATUS "Found LibTorch ${Torch_VERSION}")
endif()

message(STATUS "Merak: compiler ${MERAK_COMPILER}, CPU backend ${MERAK_CPU_BACKEND}")
find_package(absl REQUIRED CONFIG)
find_package(nlohmann_json 3 REQUIRED CONFIG)
# SentencePiece (Debian's libsentencepiece-dev) for merak-tokenize; the
# runtime builds without it.
find_package(PkgConfig)
if(PkgConfig_FOUND)
  pkg_check_modules(SentencePiece IMPORTED_TARGET sentencepiece)
endif()
if(NOT SentencePiece_FOUND)
  message(STATUS "Merak: SentencePiece not found: merak-tokenize is not built")
endif()
# yaml-cpp (Debian's libyaml-cpp-dev) for the `merak` driver's run
# configurations.
find_package(yaml-cpp CONFIG)
if(NOT yaml-cpp_FOUND)
  message(STATUS "Merak: yaml-cpp not found: the merak driver is not built")
endif()
find_package(GTest CONFIG)
set(MERAK_BUILD_UNITTESTS ${GTest_FOUND})
if(NOT GTest_FOUND)
  message(WARNING "GoogleTest not found: unit tests are not built")
endif()

# Python with torch (Debian's python3-torch) traces the test fixtures.
set(MERAK_PYTHON "/usr/bin/python3" CACHE FILEPATH "Python with torch")

# lit and FileCheck: Debian ships lit.py but no llvm-lit.
if(MERAK_COMPILER)
  set(LLVM_EXTERNAL_LIT "${MERAK_LLVM_ROOT}/build/utils/lit/lit.py"
    CACHE FILEPATH "lit driver")
  set(MERAK_LLVM_TOOLS_DIR "${MERAK_LLVM_ROOT}/bin")
endif()

# CUDA (the toolkit under /usr/local/cuda: nvcc, cuBLASLt, cuDNN) is
# optional: the CUDA backend builds where the toolkit is, for the
# architectures in MERAK_CUDA_ARCHITECTURES only (machine code for each, so
# ptxas assembles every kernel at build time).
option(MERAK_CUDA "Build the CUDA backend where the CUDA toolkit is found" ON)
set(MERAK_CUDA_ARCHITECTURES "80;90" CACHE STRING
  "GPU architectures the CUDA kernels are compiled for")
set(MERAK_CUDA_BACKEND OFF)
# The CUDA emulator (lib/Runtime/CUDA/Emulation): the CUDA backend's
# kernels compiled as C++ and run on host threads, with the CUDA runtime,
# cuBLASLt and cuDNN done on the host. Only the toolkit's headers are used:
# no nvcc, no GPU. The runtime-emulated variant (MerakRuntimeVariants.cmake)
# builds it; sanitized builds may (the kernels under ASan and UBSan).
option(MERAK_CUDA_EMULATION
  "Build the CUDA backend for the CUDA emulator (no GPU) instead of nvcc" OFF)
if(MERAK_CUDA_EMULATION)
  find_package(CUDAToolkit REQUIRED)
  find_path(MERAK_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(NOT MERAK_CUDNN_INCLUDE)
    message(FATAL_ERROR "MERAK_CUDA_EMULATION needs cudnn.h beside the "
      "CUDA toolkit's headers (${CUDAToolkit_INCLUDE_DIRS})")
  endif()
  set(MERAK_CUDA_BACKEND ON)
  message(STATUS "CUDA: the CUDA backend is built for the CUDA emulator "
    "(host threads; toolkit headers from ${CUDAToolkit_INCLUDE_DIRS})")
endif()
# Not in sanitized builds: their flags are for the host compiler, and the
# CUDA runtime is not built with them.
if(MERAK_CUDA AND NOT MERAK_CUDA_EMULATION AND NOT MERAK_FUZZ AND
   NOT MERAK_SANITIZE)
  find_program(MERAK_NVCC nvcc HINTS /usr/local/cuda/bin)
  if(MERAK_NVCC)
    if(NOT CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_COMPILER ${MERAK_NVCC})
    endif()
    set(CMAKE_CUDA_ARCHITECTURES ${MERAK_CUDA_ARCHITECTURES})
    if(MERAK_CCACHE)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${MERAK_CCACHE})
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_library(MERAK_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(MERAK_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(TARGET CUDA::cublasLt AND MERAK_CUDNN_LIBRARY AND MERAK_CUDNN_INCLUDE)
      set(MERAK_CUDA_BACKEND ON)
      message(STATUS "CUDA: toolkit ${CUDAToolkit_VERSION} at "
        "${CUDAToolkit_BIN_DIR}; the CUDA backend is built for "
        "sm_${MERAK_CUDA_ARCHITECTURES}")
    else()
      message(STATUS "CUDA: cuBLASLt or cuDNN not found beside nvcc; "
        "the CUDA backend is skipped")
    endif()
  else()
    message(STATUS "CUDA: nvcc not found; the CUDA backend is skipped")
  endif()
endif()
if(MERAK_CUDA_EMULATION)
  # The emulator has one device and no NCCL.
  set(MERAK_NCCL_LIBRARY "")
else()
  find_path(MERAK_NCCL_INCLUDE nccl.h HINTS /usr/local/cuda/include /usr/include)
  find_library(MERAK_NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64
    /usr/lib/x86_64-linux-gnu)
  if(MERAK_NCCL_INCLUDE AND MERAK_NCCL_LIBRARY)
    message(STATUS "NCCL: headers in ${MERAK_NCCL_INCLUDE}")
  else()
    set(MERAK_NCCL_LIBRARY "")
    message(STATUS "NCCL: not found; NCCL collectives are skipped")
  endif()
endif()

# MLIR and LLVM are built without RTTI; code that derives from their classes
# must be too. Translation units that include LibTorch (which needs RTTI and
# exceptions) opt back in with merak_enable_torch().
function(merak_no_rtti target)
  target_compile_options(${target} PRIVATE -fno-rtti)
endfunction()

function(merak_enable_torch target)
  target_include_directories(${target} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
  target_compile_options(${target} PRIVATE -frtti -fexceptions)
  target_link_libraries(${target} PRIVATE ${TORCH_LIBRARIES})
endfunction()
