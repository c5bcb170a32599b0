# Writes IN's text into OUT as `static const char NAME[]` (a raw string).
# Usage: cmake -DIN=file -DOUT=header.h -DNAME=kName -P embed_text.cmake
file(READ "${IN}" text)
file(WRITE "${OUT}" "// Generated from ${IN} by embed_text.cmake. Do not edit.\n#pragma once\n"
                    "static const char ${NAME}[] = R\"SMOLVMTEXT(${text})SMOLVMTEXT\";\n")
