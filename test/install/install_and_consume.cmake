# Installs the build tree into a scratch prefix, then builds and runs the
# consumer project against it with find_package(ucx_asio), and the same
# consumer with the flags of pkg-config's ucx-asio.pc (with CXX_COMPILER).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DUCX_PC_DIR=...]
#         [-DCXX_COMPILER=...] [-DWITH_NCCL=ON] -P install_and_consume.cmake
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
if(WITH_NCCL)
  # The nccl component is there where the library has it.
  file(WRITE "${WORK_DIR}/nccl-consumer/CMakeLists.txt"
    "cmake_minimum_required(VERSION 3.25)\nproject(c LANGUAGES CXX)\n"
    "find_package(ucx_asio REQUIRED COMPONENTS asio nccl)\n")
  run(${CMAKE_COMMAND} -S "${WORK_DIR}/nccl-consumer" -B "${WORK_DIR}/build-nccl"
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  # ... and missing, with find_package failing, where it does not.
  file(WRITE "${WORK_DIR}/nccl-consumer/CMakeLists.txt"
    "cmake_minimum_required(VERSION 3.25)\nproject(c LANGUAGES CXX)\n"
    "find_package(ucx_asio REQUIRED COMPONENTS nccl)\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${WORK_DIR}/nccl-consumer"
      -B "${WORK_DIR}/build-nccl" -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    message(FATAL_ERROR "find_package(ucx_asio COMPONENTS nccl) succeeded without ucx::asio_nccl")
  endif()
endif()

# pkg-config: the installed ucx-asio.pc (found next to the library, whatever
# the libdir) builds and links the same consumer, which then runs.
if(CXX_COMPILER)
  file(GLOB_RECURSE pc_files "${WORK_DIR}/prefix/*/ucx-asio.pc")
  list(LENGTH pc_files n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one installed ucx-asio.pc, found: ${pc_files}")
  endif()
  get_filename_component(pc_dir "${pc_files}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}:$ENV{PKG_CONFIG_PATH}")
  execute_process(COMMAND pkg-config --cflags --libs ucx-asio RESULT_VARIABLE rc
    OUTPUT_VARIABLE pc_flags ERROR_VARIABLE pc_err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs ucx-asio failed: ${pc_err}")
  endif()
  message(STATUS "pkg-config ucx-asio: ${pc_flags}")
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  run(${CXX_COMPILER} -std=c++20 -O1 "${SOURCE_DIR}/test/install/consumer/main.cpp" ${pc_flags}
      -o "${WORK_DIR}/consumer-pc")
  run("${WORK_DIR}/consumer-pc")
  if(WITH_NCCL)
    execute_process(COMMAND pkg-config --cflags --libs ucx-asio-nccl RESULT_VARIABLE rc
      OUTPUT_VARIABLE nccl_flags ERROR_VARIABLE pc_err OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "pkg-config --cflags --libs ucx-asio-nccl failed: ${pc_err}")
    endif()
    separate_arguments(nccl_flags UNIX_COMMAND "${nccl_flags}")
    # Links, and says whether NCCL can be loaded here (no GPU needed).
    file(WRITE "${WORK_DIR}/nccl-consumer/main.cpp"
      "#include <ucx/nccl.hpp>\n#include <cstdio>\n"
      "int main() { std::printf(\"NCCL: %s\\n\", ucx::nccl::load_library().message().c_str()); }\n")
    run(${CXX_COMPILER} -std=c++20 "${WORK_DIR}/nccl-consumer/main.cpp" ${nccl_flags} ${pc_flags}
        -o "${WORK_DIR}/nccl-consumer-pc")
    run("${WORK_DIR}/nccl-consumer-pc")
  endif()
endif()

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
