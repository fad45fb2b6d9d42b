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

# The sanitizers are MERAK_SANITIZE's (cmake/MerakSanitize.cmake), address
# and undefined unless it names others; coverage for the fuzzer comes on top.
if(NOT MERAK_SANITIZE)
  set(MERAK_SANITIZE address,undefined)
endif()
include(MerakSanitize)
add_compile_options(-fsanitize=fuzzer-no-link)
