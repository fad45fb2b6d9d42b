# Run by merak_test_suites (MerakTestSuites.cmake) after a test binary is
# built: writes OUTPUT, the ctest file with one test per suite of BINARY.
execute_process(COMMAND ${BINARY} --gtest_list_tests
  WORKING_DIRECTORY ${WORKDIR}
  TIMEOUT ${TIMEOUT}
  OUTPUT_VARIABLE listing
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${status}):\n"
    "${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(text "")
foreach(line IN LISTS lines)
  # A suite's line starts in the first column and ends with its dot
  # (typed suites add `  # TypeParam = ...`); its cases are indented.
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.( .*)?$")
    set(suite ${CMAKE_MATCH_1})
    if(suite MATCHES "^DISABLED_" OR suite MATCHES "/DISABLED_")
      continue()
    endif()
    string(APPEND text
      "add_test([=[${PREFIX}${suite}]=] [==[${BINARY}]==] "
      "[=[--gtest_filter=${suite}.*]=] --gtest_brief=1)\n"
      "set_tests_properties([=[${PREFIX}${suite}]=] PROPERTIES "
      "WORKING_DIRECTORY [==[${WORKDIR}]==])\n")
  endif()
endforeach()
file(WRITE ${OUTPUT} "${text}")
