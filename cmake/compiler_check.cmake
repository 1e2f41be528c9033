# Enables C after checking that a compiler is there, so that a machine without one gets a sentence
# saying what to install instead of CMake's "No CMAKE_C_COMPILER could be found" among other output.
include(CheckLanguage)
check_language(C)
if(NOT CMAKE_C_COMPILER)
  if(DEFINED ENV{CC} AND NOT "$ENV{CC}" STREQUAL "")
    set(fw_which "CC=$ENV{CC} is not a working C compiler")
  else()
    set(fw_which "no C compiler (cc, gcc, clang) was found on PATH")
  endif()
  message(FATAL_ERROR "flashwatt needs a C11 compiler with OpenMP (GCC, or Clang with libomp): ${fw_which}. "
                      "On Debian/Ubuntu: sudo apt-get install build-essential cmake (scripts/setup.sh does it); "
                      "elsewhere install GCC, or set CC to a compiler.")
endif()
enable_language(C)
