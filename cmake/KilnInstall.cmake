# `cmake --install`: the libraries, public headers (with the generated kiln_generated.h and
# the op table they include), the `kiln` tool, and a CMake package, so that another project
# can write
#
#   find_package(kiln CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE kiln::export)   # tracing + bundle writer (+ runtime)
#   target_link_libraries(dev PRIVATE kiln::runtime)  # loading and running bundles only
#
# Layout under the prefix: lib/libkiln_{base,schema,runtime,export}.a, include/kiln/...,
# bin/kiln, lib/cmake/kiln/{kilnConfig,kilnConfigVersion,kilnTargets}.cmake.
# The libraries are static, so kilnConfig.cmake finds what they link (FlatBuffers, zstd,
# xxHash, Threads; zlib and nlohmann-json for export) with the same finders the build
# used (cmake/KilnDeps.cmake). tests/install/consumer is a project that uses it.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)

set_target_properties(kiln_base PROPERTIES EXPORT_NAME base)
set_target_properties(kiln_schema PROPERTIES EXPORT_NAME schema)
set_target_properties(kiln_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(kiln_warnings PROPERTIES EXPORT_NAME warnings)  # link-only, no flags reach users
set(_kiln_install_targets kiln_base kiln_schema kiln_runtime kiln_warnings)
if(TARGET kiln_export)
  set_target_properties(kiln_export PROPERTIES EXPORT_NAME export)
  list(APPEND _kiln_install_targets kiln_export)
endif()
if(TARGET kiln)
  set_target_properties(kiln PROPERTIES EXPORT_NAME kiln)
  list(APPEND _kiln_install_targets kiln)
endif()

install(TARGETS ${_kiln_install_targets}
  EXPORT kilnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Headers: the public include/ folders, the generated FlatBuffers header, and
# codegen/ops.def next to kiln/format/ops.h (which includes it by its bare name). Left out:
# kiln/runtime/internal/ (export's eager interface to the runtime's kernels, no API) and
# kiln/export/testing/ (the format sample, kiln_format_sample, which is not installed).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/base/include/ ${PROJECT_SOURCE_DIR}/schema/include/
        ${PROJECT_SOURCE_DIR}/runtime/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h" PATTERN "internal" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/schema/generated/kiln/format/kiln_generated.h ${PROJECT_SOURCE_DIR}/codegen/ops.def
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln/format)
if(TARGET kiln_export)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/export/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h" PATTERN "testing" EXCLUDE)
endif()

# How the build found zstd decides how the package finds it (a CMake config or pkg-config).
if(KILN_ZSTD_TARGET STREQUAL "PkgConfig::KILN_ZSTD")
  set(KILN_ZSTD_VIA_PKGCONFIG ON)
else()
  set(KILN_ZSTD_VIA_PKGCONFIG OFF)
endif()
if(TARGET kiln_export)
  set(KILN_PACKAGE_HAS_EXPORT ON)
else()
  set(KILN_PACKAGE_HAS_EXPORT OFF)
endif()

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_INSTALL_CMAKEDIR})
