# Compile options shared by every Kiln target (added per target with kiln_target_options).

add_library(kiln_warnings INTERFACE)
target_compile_options(kiln_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)

if(KILN_SANITIZE)
  string(REPLACE ";" "," _kiln_san "${KILN_SANITIZE}")
  add_compile_options(-fsanitize=${_kiln_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_kiln_san})
endif()

# Files named *_avx2.cpp hold AVX2/FMA code paths that are selected at run time, files named
# *_avx512.cpp AVX-512 (F, VL, BW, DQ) ones, *_avx512vnni.cpp AVX-512 with VNNI (vpdpbusd,
# vpdpwssd; kept apart so that no other AVX-512 file can pick up VNNI instructions).
function(kiln_mark_avx2_sources)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "_avx2\\.cpp$")
      # -O3 in every build type: these are the vector kernels, and GCC's -O2 vectorizer
      # ("very cheap" cost model) leaves loops such as softmax's exp unvectorized.
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-O3")
    elseif(src MATCHES "_avx512\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512vl;-mavx512bw;-mavx512dq;-mavx2;-mfma;-mf16c;-O3")
    elseif(src MATCHES "_avx512vnni\\.cpp$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512vl;-mavx512bw;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c;-O3")
    endif()
  endforeach()
endfunction()
