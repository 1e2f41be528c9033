# What `cmake --install` puts in place, and what the Python package's build (scikit-build-core, SKBUILD)
# puts inside the package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The CUDA build links cuBLAS dynamically: the installed library (and command) find it where it was
# found at build time, without LD_LIBRARY_PATH.
set(FW_INSTALL_RPATH "")
if(FW_HAVE_CUDA AND CUDAToolkit_LIBRARY_DIR)
  set(FW_INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")
endif()
set_target_properties(flashwatt PROPERTIES INSTALL_RPATH "${FW_INSTALL_RPATH}")

if(SKBUILD)
  # The package's own copy, flashwatt/libflashwatt.so, which `import flashwatt` loads first. One file:
  # wheels keep no symbolic links, so the SONAME's links would become copies of a large library.
  set_target_properties(flashwatt PROPERTIES BUILD_WITH_INSTALL_RPATH ON)
  install(PROGRAMS $<TARGET_FILE:flashwatt> DESTINATION flashwatt RENAME libflashwatt.so)
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/_version.py CONTENT
       "# Written by CMake from project(flashwatt VERSION ...) when the package was built.\nversion = \"${PROJECT_VERSION}\"\n")
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/_version.py DESTINATION flashwatt)
  # the headers, for the optional torch extension that `python -m flashwatt build-torch-ext` compiles
  install(FILES include/flashwatt.h ${FW_GENERATED_INCLUDE}/flashwatt_version.h DESTINATION flashwatt/include)
  return()
endif()

install(TARGETS flashwatt EXPORT flashwattTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/flashwatt.h ${FW_GENERATED_INCLUDE}/flashwatt_version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET flashwatt_cli)
  set_target_properties(flashwatt_cli PROPERTIES INSTALL_RPATH "${FW_INSTALL_RPATH}")
  install(TARGETS flashwatt_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # `flashwatt bench --plot` finds it at <bin>/../share/flashwatt/plot.py
  install(FILES bench/plot.py DESTINATION ${CMAKE_INSTALL_DATADIR}/flashwatt)
endif()

# find_package(flashwatt CONFIG) -> flashwatt::flashwatt
set(FW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashwatt)
install(EXPORT flashwattTargets NAMESPACE flashwatt:: DESTINATION ${FW_CMAKE_DIR})
configure_package_config_file(cmake/flashwattConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/flashwattConfig.cmake
                              INSTALL_DESTINATION ${FW_CMAKE_DIR})
# The SONAME changes with the major version, so only the same major version is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashwattConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashwattConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/flashwattConfigVersion.cmake
        DESTINATION ${FW_CMAKE_DIR})

# pkg-config: relocatable (its prefix is found from the .pc file's own place), so
# `cmake --install build --prefix DIR` works for any DIR.
file(RELATIVE_PATH FW_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" FW_PC_TO_PREFIX "${FW_PC_TO_PREFIX}")
configure_file(cmake/flashwatt.pc.in ${CMAKE_CURRENT_BINARY_DIR}/flashwatt.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashwatt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
