# Third-party packages come from Debian (scripts/install-deps.sh pins the versions).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
if(MMSPARSE_BUILD_CLI)
  find_package(CLI11 2.1 REQUIRED)
  find_package(fmt 9 REQUIRED)
endif()
if(MMSPARSE_BUILD_TESTS)
  find_package(GTest 1.12 REQUIRED)
endif()
# stb (header-only): the PNG writer and caption font of the attention pictures (src/viz).
find_path(MMSPARSE_STB_INCLUDE_DIR stb_image_write.h PATH_SUFFIXES stb)
if(NOT MMSPARSE_STB_INCLUDE_DIR)
  message(FATAL_ERROR "stb_image_write.h not found: install Debian's libstb-dev "
                      "(scripts/install-deps.sh) or set MMSPARSE_STB_INCLUDE_DIR to its directory")
endif()
