# moeserve_add_library(<mod> [DEPS ...] [PRIVATE_DEPS ...])
#   Builds moeserve_<mod> from every .cpp under src/moeserve/<mod>/ (recursively), include root src/.
#   DEPS are PUBLIC (types in headers), PRIVATE_DEPS are implementation-only.
function(moeserve_add_library mod)
  cmake_parse_arguments(ARG "" "" "DEPS;PRIVATE_DEPS;EXCLUDE" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  foreach(ex ${ARG_EXCLUDE})
    list(FILTER srcs EXCLUDE REGEX "${ex}")
  endforeach()
  if(NOT srcs)  # headers only so far
    add_library(moeserve_${mod} INTERFACE)
    target_include_directories(moeserve_${mod} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(moeserve_${mod} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(moeserve_${mod} STATIC ${srcs})
  target_include_directories(moeserve_${mod} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(moeserve_${mod} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# moeserve_add_test_suite(<mod> [LIBS ...] [FIXTURES ...])
#   One GoogleTest binary per module from tests/<mod>/**/*_test.cpp, discovered into CTest;
#   FIXTURES are CTest fixtures every test of the suite requires (e.g. generated models).
function(moeserve_add_test_suite mod)
  cmake_parse_arguments(ARG "" "" "LIBS;LABELS;FIXTURES" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cpp)
  if(NOT srcs)
    return()
  endif()
  add_executable(moeserve_${mod}_tests ${srcs})
  target_include_directories(moeserve_${mod}_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(moeserve_${mod}_tests PRIVATE ${ARG_LIBS} moeserve_test_support GTest::gtest GTest::gtest_main GTest::gmock)
  # gtest_discover_tests cannot pass a list-valued property, so several fixtures are gathered
  # behind one no-op setup test that requires them all.
  set(fixture_name "")
  if(ARG_FIXTURES)
    set(fixture_name ${mod}_fixtures)
    add_test(NAME fixture.${mod}_ready COMMAND ${CMAKE_COMMAND} -E true)
    set_tests_properties(fixture.${mod}_ready PROPERTIES
      FIXTURES_SETUP ${fixture_name} FIXTURES_REQUIRED "${ARG_FIXTURES}" LABELS ${mod})
  endif()
  gtest_discover_tests(moeserve_${mod}_tests DISCOVERY_MODE PRE_TEST WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
    PROPERTIES LABELS ${mod} FIXTURES_REQUIRED "${fixture_name}")
endfunction()

# moeserve_test_definitions(<target> NAME="path" ...)
#   The paths tests read, as compile definitions relative to the build folder, where every test
#   runs (WORKING_DIRECTORY above). An absolute path would make each clone's command lines differ
#   and miss the compiler cache for every test file (docs/testing.md "CI time"); relative ones are
#   the same in every clone and still name this clone's files. Absolute paths outside both trees
#   (the tokenizer cache) stay as they are.
function(moeserve_test_definitions target)
  moeserve_source_dir_from_build(source_rel)
  set(defs "")
  foreach(def IN LISTS ARGN)
    string(REPLACE "\"${PROJECT_BINARY_DIR}/" "\"./" def "${def}")
    string(REPLACE "\"${PROJECT_BINARY_DIR}\"" "\".\"" def "${def}")
    string(REPLACE "\"${PROJECT_SOURCE_DIR}/" "\"${source_rel}/" def "${def}")
    string(REPLACE "\"${PROJECT_SOURCE_DIR}\"" "\"${source_rel}\"" def "${def}")
    list(APPEND defs "${def}")
  endforeach()
  target_compile_definitions(${target} PRIVATE ${defs})
endfunction()

# The source tree relative to the build folder, without a trailing slash ("..", or "." in-tree).
function(moeserve_source_dir_from_build out)
  file(RELATIVE_PATH rel ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  string(REGEX REPLACE "/$" "" rel "${rel}")
  if(rel STREQUAL "")
    set(rel ".")
  endif()
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

# A built executable's path relative to the build folder, for moeserve_test_definitions.
function(moeserve_test_executable_path out target)
  set(${out} "$<PATH:RELATIVE_PATH,$<TARGET_FILE:${target}>,${PROJECT_BINARY_DIR}>" PARENT_SCOPE)
endfunction()

# moeserve_add_benchmark(<name> [LIBS ...]) from benchmarks/<name>_bench.cpp
function(moeserve_add_benchmark name)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  add_executable(${name}_bench ${CMAKE_CURRENT_SOURCE_DIR}/${name}_bench.cpp)
  target_include_directories(${name}_bench PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name}_bench PRIVATE ${ARG_LIBS} benchmark::benchmark)
endfunction()
