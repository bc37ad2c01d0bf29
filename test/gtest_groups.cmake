# Run after a GoogleTest executable is linked (cmake -P): lists its tests and
# writes CTEST_FILE, which registers one ctest test per group: the tests of
# one suite, and of a parameterized suite, those of one parameter (the part of
# a test's name after its last "/"). A group runs in one process with
# --gtest_filter=<suite>.*[/<parameter>]; its ctest name is that filter.
#
#   -D TEST_EXECUTABLE=<file> -D CTEST_FILE=<file> -D TEST_ENVIRONMENT=<a=b;c=d>
#   -D TEST_TIMEOUT=<seconds>
#
# One process per group instead of one per test: a test's own work is often
# shorter than a process start (UCX's and the sanitizers' initialization).
foreach(var TEST_EXECUTABLE CTEST_FILE TEST_TIMEOUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "gtest_groups.cmake needs -D ${var}=...")
  endif()
endforeach()

execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${status}):\n${listing}${errors}")
endif()

string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(groups)
set(suite "")
foreach(line IN LISTS lines)
  # Drop the "  # GetParam() = ..." or "  # TypeParam = ..." comment.
  string(REGEX REPLACE "  +#.*$" "" line "${line}")
  if(line MATCHES "^([^ ].*)\\.$")
    set(suite "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^  +([^ ]+)$" AND NOT suite STREQUAL "")
    set(test "${CMAKE_MATCH_1}")
    if(test MATCHES "^DISABLED_" OR suite MATCHES "(^|/)DISABLED_")
      continue()
    endif()
    if(test MATCHES "/([^/]+)$")
      set(group "${suite}.*/${CMAKE_MATCH_1}")
    else()
      set(group "${suite}.*")
    endif()
    list(APPEND groups "${group}")
  endif()
endforeach()
list(REMOVE_DUPLICATES groups)

set(content "# Written by gtest_groups.cmake from ${TEST_EXECUTABLE} --gtest_list_tests.\n")
foreach(group IN LISTS groups)
  string(APPEND content
    "add_test([==[${group}]==] [==[${TEST_EXECUTABLE}]==] [==[--gtest_filter=${group}]==])\n"
    "set_tests_properties([==[${group}]==] PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${TEST_TIMEOUT}"
    " ENVIRONMENT [==[${TEST_ENVIRONMENT}]==])\n")
endforeach()
file(WRITE "${CTEST_FILE}" "${content}")
