# Generates, from cudart_symbols.txt (name + version tag per line):
#   OUT_MAP:   the linker version script that exports exactly those names
#              under their tag and hides everything else;
#   OUT_STUBS: one weak stub per name returning cudaErrorNotSupported and
#              naming itself once on stderr. A real definition elsewhere in
#              the library replaces the weak one at link time.
# Usage: cmake -DSYMBOLS=... -DOUT_MAP=... -DOUT_STUBS=... -P gen_cudart.cmake
file(STRINGS "${SYMBOLS}" lines REGEX "^[^#]")
set(by_version "")
set(stubs "// Generated from cudart_symbols.txt by gen_cudart.cmake. Do not edit.\n")
string(APPEND stubs "#include \"shim/stub_report.h\"\n\nextern \"C\" {\n")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "[ \t]+" ";" parts "${line}")
  list(GET parts 0 name)
  list(GET parts 1 version)
  string(MAKE_C_IDENTIFIER "${version}" vid)
  if(NOT DEFINED syms_${vid})
    list(APPEND by_version "${version}")
    set(syms_${vid} "")
  endif()
  string(APPEND syms_${vid} "    ${name};\n")
  string(APPEND stubs "__attribute__((weak, visibility(\"default\"))) int ${name}() {\n"
                      "  static std::atomic<bool> reported{false};\n"
                      "  return smolvm::shim::StubNotSupported(&reported, \"${name}\");\n}\n")
endforeach()
string(APPEND stubs "}  // extern \"C\"\n")
set(map "/* Generated from cudart_symbols.txt by gen_cudart.cmake. Do not edit. */\n")
set(first TRUE)
foreach(version IN LISTS by_version)
  string(MAKE_C_IDENTIFIER "${version}" vid)
  string(APPEND map "${version} {\n  global:\n${syms_${vid}}")
  if(first)
    string(APPEND map "  local: *;\n")
    set(first FALSE)
  endif()
  string(APPEND map "};\n")
endforeach()
file(WRITE "${OUT_MAP}.tmp" "${map}")
file(WRITE "${OUT_STUBS}.tmp" "${stubs}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT_MAP}.tmp" "${OUT_MAP}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT_STUBS}.tmp" "${OUT_STUBS}")
