# `cmake --install BUILD --prefix P` puts the binary in P/bin and the docs in
# P/share/doc/moeserve; `cpack --config BUILD/CPackConfig.cmake` (run in BUILD) makes the Debian
# package of the same files, its dependencies found by dpkg-shlibdeps from the binary's shared
# libraries (ZeroMQ, Gloo, OpenSSL, ...). tests/integration/install_test.py checks both.
include(GNUInstallDirs)
install(TARGETS moeserve RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES README.md CONTRIBUTING.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME moeserve)
set(CPACK_PACKAGE_VENDOR "moeserve")
set(CPACK_PACKAGE_CONTACT "moeserve developers <moeserve@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Serving engine for Mixture-of-Experts LLMs (Qwen3-MoE, DeepSeek-V3) on CPUs, OpenAI-compatible API")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# The tree is built for x86-64-v3 (AVX2 + FMA): amd64 machines without AVX2 cannot run it.
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
include(CPack)
