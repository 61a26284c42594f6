# Runs one mmsparse bench with --json - on the CPU and on the GPU and checks that the reports'
# plan metrics agree: every "density" and needle "covered" value, in order, the same text on both
# (the GPU's plan estimated by kernels and downloaded, PreparedPlan::plan(); the CPU's built on the
# host). The GPU report must say its index was built there ("index_built": "gpu").
#   cmake -DCOMMAND="mmsparse;bench;..." -DWORKDIR=dir -P compare_devices.cmake
if(WORKDIR)
  file(MAKE_DIRECTORY ${WORKDIR})
endif()

function(run_bench device result_var)
  execute_process(COMMAND ${COMMAND} --device ${device} --json - WORKING_DIRECTORY ${WORKDIR}
                  RESULT_VARIABLE exit_code OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT exit_code STREQUAL 0)
    message(FATAL_ERROR "--device ${device}: exit code ${exit_code}\n${stdout}${stderr}")
  endif()
  set(${result_var} "${stdout}" PARENT_SCOPE)
endfunction()

# Every `"key": value` of the report, in order.
function(values_of report key result_var)
  string(REGEX MATCHALL "\"${key}\": *[-+0-9.eE]+" matches "${report}")
  set(${result_var} "${matches}" PARENT_SCOPE)
endfunction()

run_bench(cpu cpu_report)
run_bench(cuda gpu_report)
if(NOT gpu_report MATCHES "\"index_built\": *\"gpu\"")
  message(FATAL_ERROR "the GPU report has no index built on the GPU:\n${gpu_report}")
endif()
foreach(key density covered)
  values_of("${cpu_report}" ${key} cpu_values)
  values_of("${gpu_report}" ${key} gpu_values)
  if(key STREQUAL "density" AND NOT cpu_values)
    message(FATAL_ERROR "the CPU report has no density:\n${cpu_report}")
  endif()
  if(NOT cpu_values STREQUAL gpu_values)
    message(FATAL_ERROR "\"${key}\" differs between the devices:\n  cpu: ${cpu_values}\n"
                        "  gpu: ${gpu_values}")
  endif()
  message(STATUS "${key}: ${gpu_values}")
endforeach()
