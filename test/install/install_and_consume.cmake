# Installs the build tree into a scratch prefix, then builds and runs the
# consumer project against it with find_package(ucx_asio).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DSANITIZE=...] -P install_and_consume.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
# Installed headers include only installed headers (<ucx/...>, never the
# implementation's headers, which stay in the source tree's lib/).
file(GLOB_RECURSE headers "${WORK_DIR}/prefix/include/ucx/*.hpp")
foreach(h IN LISTS headers)
  file(STRINGS "${h}" quoted REGEX "^#include \"")
  if(quoted)
    message(FATAL_ERROR "${h} includes a header outside the installed tree: ${quoted}")
  endif()
endforeach()
set(flags "")
if(SANITIZE)
  # A sanitized static library needs the sanitizer runtimes in the consumer.
  set(flags "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/test/install/consumer" -B "${WORK_DIR}/build"
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release ${flags})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")
