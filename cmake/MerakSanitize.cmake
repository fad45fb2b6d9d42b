# MERAK_SANITIZE=<list>: every target of the project compiled and linked
# with -fsanitize=<list>, e.g. address,undefined or thread (the list is
# passed as -fsanitize= takes it), by GCC or clang. Tests stay in the build
# and run sanitized; scripts/sanitize.sh configures and runs it
# (docs/sanitizers.md). MERAK_FUZZ=ON uses the same flags, address,undefined
# unless MERAK_SANITIZE says otherwise. LibTorch, MLIR, LLVM, oneDNN and
# Gloo are Debian's, not instrumented: the sanitizers see only what our code
# does, to its own memory and to theirs.

if(MERAK_SANITIZE MATCHES "thread" AND
   MERAK_SANITIZE MATCHES "address|leak|memory")
  message(FATAL_ERROR "MERAK_SANITIZE=${MERAK_SANITIZE}: ThreadSanitizer "
    "cannot be combined with AddressSanitizer, LeakSanitizer or "
    "MemorySanitizer; build them in separate trees")
endif()

set(MERAK_SANITIZE_FLAGS -fsanitize=${MERAK_SANITIZE})
# vptr checks need RTTI, which the MLIR side is built without; the rest of
# -fsanitize=undefined applies everywhere.
if(MERAK_SANITIZE MATCHES "undefined")
  list(APPEND MERAK_SANITIZE_FLAGS -fno-sanitize=vptr)
endif()
# MERAK_SANITIZE_NO_RECOVER: every report ends the process with an error
# (UBSan's too, which otherwise print and go on), for builds whose tests
# run outside scripts/sanitize.sh's log checks: the runtime-emulated
# variant (MerakRuntimeVariants.cmake).
option(MERAK_SANITIZE_NO_RECOVER
  "Sanitizer reports end the process (-fno-sanitize-recover=all)" OFF)
if(MERAK_SANITIZE_NO_RECOVER)
  list(APPEND MERAK_SANITIZE_FLAGS -fno-sanitize-recover=all)
endif()
add_link_options(${MERAK_SANITIZE_FLAGS})
# Frame pointers keep the sanitizers' fast unwinder exact. Where the build
# type carries no debug information, line tables keep the reports
# symbolized at little build cost.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(MERAK_SANITIZE_LINE_TABLES -gline-tables-only)
else()
  set(MERAK_SANITIZE_LINE_TABLES -g1)
endif()
add_compile_options(${MERAK_SANITIZE_FLAGS} -fno-omit-frame-pointer
  $<$<CONFIG:Release,MinSizeRel>:${MERAK_SANITIZE_LINE_TABLES}>)
message(STATUS "Merak: built with -fsanitize=${MERAK_SANITIZE}")
