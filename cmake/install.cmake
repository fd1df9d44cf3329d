# cmake/install.cmake - `cmake --install <build> --prefix <dir>` installs the C++ library as a
# CMake package: <dir>/lib/libmhc.a, <dir>/include/mhc/*.hpp and <dir>/lib/cmake/mhc/, so that a
# project says find_package(mhc) and links mhc::mhc. Everything here is component `dev`; the
# Python wheel installs only component `python` (pyproject.toml).
include(CMakePackageConfigHelpers)

set(MHC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mhc)

install(TARGETS mhc EXPORT mhcTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mhc
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
        FILES_MATCHING PATTERN "*.hpp")
install(EXPORT mhcTargets NAMESPACE mhc:: FILE mhcTargets.cmake
        DESTINATION ${MHC_INSTALL_CMAKEDIR} COMPONENT dev)

# mhcConfig.cmake finds what the static library links (MHC_WITH_CUDA and OpenMP_CXX_FOUND are
# substituted as this build saw them).
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mhcConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/mhcConfig.cmake
                              INSTALL_DESTINATION ${MHC_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mhcConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mhcConfig.cmake ${PROJECT_BINARY_DIR}/mhcConfigVersion.cmake
        DESTINATION ${MHC_INSTALL_CMAKEDIR} COMPONENT dev)
