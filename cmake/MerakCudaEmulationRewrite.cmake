# Rewrites a CUDA source (.cu) into C++ for the CUDA emulator
# (lib/Runtime/CUDA/Emulation/Device.h): a launch `K<<<config>>>(args)`
# becomes `MERAK_EMULATED_LAUNCH(config)([&](auto &&...x) { K(x...); })(args)`
# (the kernel's template arguments deduced from the arguments, as nvcc
# does), and a dynamic shared-memory array `extern __shared__ __align__(N)
# T name[];` a pointer to the launch's; CUB's includes are dropped. Line numbers are kept, and `#line`
# names the source.
#   cmake -DINPUT=<file.cu> -DOUTPUT=<file.cpp> -P MerakCudaEmulationRewrite.cmake
file(READ ${INPUT} text)
string(REGEX REPLACE
  "([A-Za-z_][A-Za-z_0-9]*(<[^<>;]*>)?)([ \t\r\n]*)<<<([^<>;]*)>>>"
  "MERAK_EMULATED_LAUNCH(\\4)([&](auto &&...merakArgs) { \\1(merakArgs...); })\\3"
  text "${text}")
if(text MATCHES "<<<")
  message(FATAL_ERROR "${INPUT}: a kernel launch the CUDA emulator's "
    "rewrite does not know (a kernel name, optionally with template "
    "arguments, then <<<configuration>>> without < or >)")
endif()
string(REGEX REPLACE
  "extern __shared__ (__align__\\([0-9]+\\) )?([A-Za-z_][A-Za-z_0-9 ]*[A-Za-z_0-9]) ([A-Za-z_][A-Za-z_0-9]*)\\[\\];"
  "\\2 *\\3 = static_cast<\\2 *>(::merak::runtime::cuda::emulation::dynamicShared());"
  text "${text}")
# CUB's headers are device code: its radix sort is Device.h's.
string(REGEX REPLACE "#include <cub/[^>]*>" "// (CUB: Device.h)" text
  "${text}")
file(WRITE ${OUTPUT}.new "#line 1 \"${INPUT}\"\n${text}")
file(COPY_FILE ${OUTPUT}.new ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.new)
