# Generates, from a symbol list (name + version tag per line; tag "Base" =
# exported without a version, as NVML does):
#   OUT_MAP:   the linker version script that exports exactly those names
#              under their tag and hides everything else, plus EXTRA_MAP
#              (smolvm's own version nodes, if any);
#   OUT_STUBS: one weak stub per name returning REPORT(&reported, "name") —
#              the library's not-supported status, after naming itself once
#              on stderr. A real definition elsewhere in the library replaces
#              the weak one at link time.
# Usage: cmake -DSYMBOLS=... -DOUT_MAP=... -DOUT_STUBS=... -DINCLUDE=shim/x.h
#              -DREPORT=ns::Fn [-DEXTRA_MAP=file.map] -P gen_stubs.cmake
file(STRINGS "${SYMBOLS}" lines REGEX "^[^#]")
get_filename_component(list_name "${SYMBOLS}" NAME)
set(by_version "")
set(stubs "// Generated from ${list_name} by gen_stubs.cmake. Do not edit.\n")
string(APPEND stubs "#include <atomic>\n\n#include \"${INCLUDE}\"\n\nextern \"C\" {\n")
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
                      "  return ${REPORT}(&reported, \"${name}\");\n}\n")
endforeach()
string(APPEND stubs "}  // extern \"C\"\n")
set(map "/* Generated from ${list_name} by gen_stubs.cmake. Do not edit. */\n")
set(first TRUE)
foreach(version IN LISTS by_version)
  string(MAKE_C_IDENTIFIER "${version}" vid)
  if(version STREQUAL "Base")
    string(APPEND map "{\n  global:\n${syms_${vid}}")  # the anonymous node: unversioned
  else()
    string(APPEND map "${version} {\n  global:\n${syms_${vid}}")
  endif()
  if(first)
    string(APPEND map "  local: *;\n")
    set(first FALSE)
  endif()
  string(APPEND map "};\n")
endforeach()
if(DEFINED EXTRA_MAP AND NOT EXTRA_MAP STREQUAL "")
  file(READ "${EXTRA_MAP}" extra)
  string(APPEND map "${extra}")
endif()
file(WRITE "${OUT_MAP}.tmp" "${map}")
file(WRITE "${OUT_STUBS}.tmp" "${stubs}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT_MAP}.tmp" "${OUT_MAP}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT_STUBS}.tmp" "${OUT_STUBS}")
