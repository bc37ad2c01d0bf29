# Installs the build tree into a scratch prefix, then builds and runs the
# consumer project against it with find_package(ucx_asio).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DUCX_PC_DIR=...]
#         -P install_and_consume.cmake
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
if(UCX_PC_DIR)
  # The UCX the library was built against comes first for the consumer.
  set(ENV{PKG_CONFIG_PATH} "${UCX_PC_DIR}:$ENV{PKG_CONFIG_PATH}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/test/install/consumer" -B "${WORK_DIR}/build"
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")

# A consumer whose pkg-config finds another UCX than the library was built
# with is told so at configure time (the package is not found, with why).
file(MAKE_DIRECTORY "${WORK_DIR}/other-ucx")
file(WRITE "${WORK_DIR}/other-ucx/ucx.pc"
  "prefix=/opt/other-ucx\nName: ucx\nDescription: another UCX\nVersion: 99.0.0\n"
  "Cflags: -I\${prefix}/include\nLibs: -L\${prefix}/lib -lucp\n")
set(ENV{PKG_CONFIG_PATH} "${WORK_DIR}/other-ucx")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/test/install/consumer"
    -B "${WORK_DIR}/build-other" -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "a consumer found UCX 99.0.0 and still configured against ucx_asio")
endif()
string(REGEX REPLACE "[ \n]+" " " flat "${err}") # CMake wraps its messages
if(NOT flat MATCHES "built against UCX [0-9.]+ .*but pkg-config finds UCX 99.0.0")
  message(FATAL_ERROR "the UCX mismatch was not explained:\n${err}")
endif()
message(STATUS "UCX mismatch refused: ok")
