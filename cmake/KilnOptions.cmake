# Compile options shared by every Kiln target (added per target with kiln_target_options).

add_library(kiln_warnings INTERFACE)
target_compile_options(kiln_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
# GCC's note that passing 32-byte vectors changed ABI in GCC 4.6 ignores the files' own
# `#pragma GCC diagnostic ignored "-Wpsabi"` (the portable 8-lane kernels pass vectors only
# between their internal functions); only the flag silences it.
target_compile_options(kiln_warnings INTERFACE
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-psabi>)

if(KILN_SANITIZE)
  string(REPLACE ";" "," _kiln_san "${KILN_SANITIZE}")
  add_compile_options(-fsanitize=${_kiln_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_kiln_san})
endif()

# Files named *_avx2.cpp hold AVX2/FMA code paths that are selected at run time, files named
# *_avx512.cpp AVX-512 (F, VL, BW, DQ) ones, *_avx512vnni.cpp AVX-512 with VNNI (vpdpbusd,
# vpdpwssd; kept apart so that no other AVX-512 file can pick up VNNI instructions).
#
# -O3 in every build type: these are the vector kernels, and GCC's -O2 vectorizer ("very
# cheap" cost model) leaves loops such as softmax's exp unvectorized. Except under
# AddressSanitizer, where the kernels are compiled for checking, not speed: GCC's ASan at -O3
# on the heavily inlined AVX-512 conv file takes ~170 s (20 s at -O1), most of a fresh
# machine's ASan stage.
set(_kiln_simd_opt -O3)
if(KILN_SANITIZE MATCHES "address")
  set(_kiln_simd_opt -O1)
endif()
function(kiln_mark_avx2_sources)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "_avx2\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx2;-mfma;-mf16c;${_kiln_simd_opt}")
    elseif(src MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512vl;-mavx512bw;-mavx512dq;-mavx2;-mfma;-mf16c;${_kiln_simd_opt}")
    elseif(src MATCHES "_avx512vnni\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512vl;-mavx512bw;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c;${_kiln_simd_opt}")
    endif()
  endforeach()
endfunction()

# Debug information in RelWithDebInfo and Debug builds. "lines" (-g1, the default): line
# tables and function descriptions, enough for backtraces, perf, heaptrack and the
# sanitizers' reports, and about 30 % less compile time than -g (measured on this project's
# heaviest files: 44 % on an AVX-512 kernel file, 33 % on a test file), which is most of a
# fresh machine's CI. "full" (-g): local variables too, for stepping through in a debugger.
set(KILN_DEBUG_INFO "lines" CACHE STRING
    "Debug information in RelWithDebInfo and Debug builds: lines (-g1) or full (-g)")
set_property(CACHE KILN_DEBUG_INFO PROPERTY STRINGS lines full)
if(KILN_DEBUG_INFO STREQUAL "lines")
  # After CMAKE_<LANG>_FLAGS_<CONFIG>'s -g on the command line: the last -g level wins.
  add_compile_options($<$<CONFIG:Debug,RelWithDebInfo>:-g1>)
elseif(NOT KILN_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "KILN_DEBUG_INFO is '${KILN_DEBUG_INFO}': use lines or full")
endif()
