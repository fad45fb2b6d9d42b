# merak_test_suites(<target> [PREFIX <prefix>] [TIMEOUT <seconds>]): one
# ctest test per GoogleTest suite of <target> (`--gtest_filter=Suite.*`),
# listed from the binary after each build, as gtest_discover_tests lists
# cases. A case per process would load the binary's libraries (LibTorch's
# take about a second) once per case: a suite per process loads them once
# per suite, and a failure still names its case in the test's output.
set(MERAK_TEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/MerakTestSuitesList.cmake)

function(merak_test_suites target)
  cmake_parse_arguments(ARG "" "PREFIX;TIMEOUT" "" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  set(ctest_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D BINARY=$<TARGET_FILE:${target}>
      -D OUTPUT=${ctest_file} -D PREFIX=${ARG_PREFIX}
      -D TIMEOUT=${ARG_TIMEOUT} -D WORKDIR=${CMAKE_CURRENT_BINARY_DIR}
      -P ${MERAK_TEST_SUITES_SCRIPT}
    BYPRODUCTS ${ctest_file}
    VERBATIM)
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${ctest_file})
endfunction()
