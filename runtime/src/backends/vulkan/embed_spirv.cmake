# cmake -DSPV=in.spv -DOUT=out.cpp -DNAME=variant -P embed_spirv.cmake
# Writes the SPIR-V words of SPV as a C++ array kiln_spv_<NAME>.
file(READ ${SPV} _hex HEX)
string(LENGTH "${_hex}" _len)
math(EXPR _rem "${_len} % 8")
if(NOT _rem EQUAL 0 OR _len EQUAL 0)
  message(FATAL_ERROR "${SPV}: not a whole number of 32-bit words")
endif()
# Little-endian bytes -> 32-bit words.
string(REGEX REPLACE "(..)(..)(..)(..)" "0x\\4\\3\\2\\1u," _words "${_hex}")
math(EXPR _count "${_len} / 8")
file(WRITE ${OUT} "// Generated from ${NAME}.spv by embed_spirv.cmake.\n#include <cstddef>\n#include <cstdint>\n"
  "extern const std::uint32_t kiln_spv_${NAME}[];\nextern const std::size_t kiln_spv_${NAME}_words;\n"
  "alignas(4) const std::uint32_t kiln_spv_${NAME}[] = {${_words}};\n"
  "const std::size_t kiln_spv_${NAME}_words = ${_count};\n")
