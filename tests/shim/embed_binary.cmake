# Writes IN's bytes into OUT as `alignas(8) static const unsigned char NAME[]`.
# Usage: cmake -DIN=file -DOUT=header.h -DNAME=kName -P embed_binary.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "// Generated from ${IN} by embed_binary.cmake. Do not edit.\n#pragma once\n"
                    "alignas(8) static const unsigned char ${NAME}[] = {\n${bytes}};\n")
