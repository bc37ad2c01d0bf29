# ctest entries for ucx-asio-perf --check (included from test/integration).
# Under a sanitizer each run takes a fifth of the iterations: the same paths
# and content checks, in the time the sanitizer's slower code allows.
set(_iters 100)
set(_warmup 10)
if(UCX_ASIO_SANITIZE)
  set(_iters 20)
  set(_warmup 2)
endif()
set(_perf_tests tag_lat tag_bw am_lat am_bw stream_lat stream_bw put_bw get_bw)
# One ctest test per transport, completion style and progress mode: one
# ucx-asio-perf process runs each of its tests at each size in turn, against
# one local server process (--test and --size take lists).
foreach(transport library ucp tcp)
  foreach(style callback coroutine)
    if(transport STREQUAL "ucp" AND style STREQUAL "coroutine")
      continue()
    endif()
    set(_tests)
    foreach(test ${_perf_tests})
      if(transport STREQUAL "ucp" AND NOT test MATCHES "^(tag_|put_|get_)")
        continue() # raw UCP runs the tag and RMA tests; ucx_perftest has the others
      endif()
      if(transport STREQUAL "tcp" AND test MATCHES "^(put_|get_)")
        continue() # no one-sided access over a socket (perf_smoke.tcp.rma_refused)
      endif()
      list(APPEND _tests ${test})
    endforeach()
    string(REPLACE ";" "," _tests "${_tests}")
    set(_sizes 8)
    if(style STREQUAL "callback")
      set(_sizes 8,300000) # and the rendezvous and multi-fragment paths
    endif()
    foreach(mode event poll hybrid)
      set(_name perf_smoke.${transport}.${mode}.${style})
      add_test(NAME ${_name}
        COMMAND ucx-asio-perf --local --check --transport ${transport} --progress ${mode}
                --style ${style} --test ${_tests} --size ${_sizes} --iters ${_iters}
                --warmup ${_warmup} --window 16)
      set_tests_properties(${_name} PROPERTIES ENVIRONMENT "${UCX_ASIO_TEST_ENV}" TIMEOUT 600)
    endforeach()
  endforeach()
endforeach()

# tag_bw received with a ucx::tag_receiver (--style batch), between the two
# processes, content checked: eager and rendezvous sizes.
foreach(mode event poll hybrid)
  set(_name perf_smoke.library.${mode}.batch)
  add_test(NAME ${_name}
    COMMAND ucx-asio-perf --local --check --progress ${mode} --style batch --test tag_bw
            --size 8,300000 --iters ${_iters} --warmup ${_warmup} --window 16)
  set_tests_properties(${_name} PROPERTIES ENVIRONMENT "${UCX_ASIO_TEST_ENV}" TIMEOUT 600)
endforeach()
add_test(NAME perf_smoke.batch_needs_tag_bw COMMAND ucx-asio-perf --local --style batch --test am_bw)
set_tests_properties(perf_smoke.batch_needs_tag_bw PROPERTIES
  PASS_REGULAR_EXPRESSION "--style batch runs tag_bw over the library in host memory")

# The library over UCX's TCP transport only.
string(REPLACE ";" "," _all_tests "${_perf_tests}")
add_test(NAME perf_smoke.library_ucx_tcp
  COMMAND ucx-asio-perf --local --check --test ${_all_tests} --size 70000 --iters 50 --warmup 5)
set_tests_properties(perf_smoke.library_ucx_tcp PROPERTIES
  ENVIRONMENT "${UCX_ASIO_TEST_ENV};UCX_TLS=tcp,self" TIMEOUT 600)

# Streams connected by host:port (the other tests connect by worker address).
foreach(mode event poll)
  set(_name perf_smoke.library_sockaddr.${mode})
  add_test(NAME ${_name}
    COMMAND ucx-asio-perf --local --check --connect sockaddr --test stream_lat,stream_bw
            --progress ${mode} --size 70000 --iters 50 --warmup 5)
  set_tests_properties(${_name} PROPERTIES ENVIRONMENT "${UCX_ASIO_TEST_ENV}" TIMEOUT 600)
endforeach()
add_test(NAME perf_smoke.bad_connect COMMAND ucx-asio-perf --local --connect ip)
set_tests_properties(perf_smoke.bad_connect PROPERTIES
  PASS_REGULAR_EXPRESSION "--connect takes address or sockaddr")

# Device memory on both sides (--memory cuda), content checked, sizes of one
# chunk and of several: skipped (exit status 77, the reason printed) where
# the machine has no GPU or the build no CUDA.
add_test(NAME perf_smoke.library.cuda
  COMMAND ucx-asio-perf --local --check --memory cuda --test tag_bw,am_bw,stream_bw,put_bw,get_bw
          --size 300000,3000000 --iters 20 --warmup 2 --window 4)
set_tests_properties(perf_smoke.library.cuda PROPERTIES ENVIRONMENT "${UCX_ASIO_TEST_ENV}"
  TIMEOUT 600 SKIP_RETURN_CODE 77)
add_test(NAME perf_smoke.cuda_needs_library COMMAND ucx-asio-perf --local --transport ucp
  --memory cuda --test tag_bw)
set_tests_properties(perf_smoke.cuda_needs_library PROPERTIES
  PASS_REGULAR_EXPRESSION "--memory cuda runs with --transport library")

# RMA over Asio TCP: refused with a clear message and exit status 2.
add_test(NAME perf_smoke.tcp.rma_refused COMMAND ucx-asio-perf --local --transport tcp --test put_bw)
set_tests_properties(perf_smoke.tcp.rma_refused PROPERTIES ENVIRONMENT "${UCX_ASIO_TEST_ENV}"
  PASS_REGULAR_EXPRESSION "one-sided remote memory access")

# Bad input: a clear error and exit status 2, no crash.
add_test(NAME perf_smoke.bad_option COMMAND ucx-asio-perf --local --test no_such_test)
set_tests_properties(perf_smoke.bad_option PROPERTIES WILL_FAIL TRUE)
add_test(NAME perf_smoke.bad_list COMMAND ucx-asio-perf --local --test tag_lat,no_such_test)
set_tests_properties(perf_smoke.bad_list PROPERTIES PASS_REGULAR_EXPRESSION "unknown test 'no_such_test'")
add_test(NAME perf_smoke.empty_list_item COMMAND ucx-asio-perf --local --size 8,,16)
set_tests_properties(perf_smoke.empty_list_item PROPERTIES PASS_REGULAR_EXPRESSION "--size needs a number")
add_test(NAME perf_smoke.bad_size COMMAND ucx-asio-perf --local --size 12x)
set_tests_properties(perf_smoke.bad_size PROPERTIES PASS_REGULAR_EXPRESSION "--size needs a number")

# The operating system's wake-up floor runs.
add_test(NAME perf_smoke.pipe_pingpong COMMAND pipe_pingpong --iters 200 --warmup 10)

# tools/callgrind.sh --brief with few messages: every count the benchmark
# reports is made (a number; its value is not asserted: with so few messages,
# or on a busy machine, a side under callgrind waits for its peer and counts
# its empty progress calls). Valgrind (found by test/integration) cannot run
# a sanitized program: plain builds only.
if(UCX_ASIO_VALGRIND AND NOT UCX_ASIO_SANITIZE)
  add_test(NAME perf_smoke.callgrind_counts
    COMMAND bash -c "set -o pipefail; '${PROJECT_SOURCE_DIR}/tools/callgrind.sh' --brief '${CMAKE_BINARY_DIR}' | tee /dev/stderr | grep -cE '^(ucp|library)_(send|recv) -?[0-9]+$' | grep -qx 4")
  set_tests_properties(perf_smoke.callgrind_counts PROPERTIES
    ENVIRONMENT "${UCX_ASIO_TEST_ENV};CALLGRIND_MSG_N1=200;CALLGRIND_MSG_N2=600;CALLGRIND_MSG_WARMUP=100;CALLGRIND_REPEATS=1"
    TIMEOUT 300)
endif()
