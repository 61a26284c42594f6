# Runs one mmsparse command and checks its exit code and output.
#   cmake -DCOMMAND="a;b;c" -DEXPECT_EXIT=0 -DEXPECT_OUTPUT=regex [-DWORKDIR=dir] -P expect_command.cmake
if(WORKDIR)
  file(MAKE_DIRECTORY ${WORKDIR})
endif()
execute_process(COMMAND ${COMMAND} WORKING_DIRECTORY ${WORKDIR}
                RESULT_VARIABLE exit_code OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
set(output "${stdout}${stderr}")
if(NOT exit_code STREQUAL EXPECT_EXIT)
  message(FATAL_ERROR "expected exit code ${EXPECT_EXIT}, got ${exit_code}\n${output}")
endif()
if(EXPECT_OUTPUT AND NOT output MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "output does not match '${EXPECT_OUTPUT}':\n${output}")
endif()
message(STATUS "${output}")
