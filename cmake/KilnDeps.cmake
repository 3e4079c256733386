# Third-party dependencies, all from Debian packages (see scripts/install-deps.sh).

find_package(FlatBuffers CONFIG REQUIRED)
find_program(KILN_FLATC flatc REQUIRED)

# zstd: Debian 12 ships no CMake config for libzstd; fall back to pkg-config.
find_package(zstd CONFIG QUIET)
if(TARGET zstd::libzstd_shared)
  set(KILN_ZSTD_TARGET zstd::libzstd_shared)
else()
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(KILN_ZSTD REQUIRED IMPORTED_TARGET libzstd)
  set(KILN_ZSTD_TARGET PkgConfig::KILN_ZSTD)
endif()

# xxHash (the format's checksum): header + shared library, via pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(KILN_XXHASH REQUIRED IMPORTED_TARGET libxxhash)

find_package(Threads REQUIRED)

if(KILN_VULKAN)
  find_package(Vulkan COMPONENTS glslc)
  if(NOT Vulkan_FOUND OR NOT TARGET Vulkan::glslc)
    message(WARNING "Vulkan headers or glslc not found: building without the Vulkan backend")
    set(KILN_VULKAN OFF CACHE BOOL "" FORCE)
  endif()
endif()

# The .pt2 importer (export only): zlib for the archive's deflated members (the zip reader
# is Kiln's own, export/src/import/archive.cpp), nlohmann-json for its JSON.
if(KILN_BUILD_EXPORT)
  find_package(ZLIB REQUIRED)
  find_package(nlohmann_json CONFIG REQUIRED)
endif()
# The import tests write their archives with libzip (a second, independent implementation).
if(KILN_BUILD_TESTS AND KILN_BUILD_EXPORT)
  pkg_check_modules(KILN_LIBZIP REQUIRED IMPORTED_TARGET libzip)
endif()

if(KILN_BUILD_CLI AND KILN_BUILD_EXPORT)
  find_package(CLI11 CONFIG REQUIRED)
  find_package(nlohmann_json CONFIG REQUIRED)
endif()
if(KILN_BUILD_TESTS AND KILN_BUILD_EXPORT)
  find_package(GTest REQUIRED)
endif()
if(KILN_BUILD_BENCH AND KILN_BUILD_EXPORT)
  find_package(benchmark REQUIRED)
endif()
