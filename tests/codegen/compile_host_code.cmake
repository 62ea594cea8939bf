# ctest script: nvcc compiles the host code of generated/${MODEL} (forward.cu: the launch
# sequences; forward_ref.cpp and model.cpp through nvcc's host compiler). Fails on any error.
file(MAKE_DIRECTORY ${OUT}/${MODEL})
foreach(src forward.cu forward_ref.cpp model.cpp)
  execute_process(
    COMMAND ${NVCC} -c -std=c++20 -x cu -gencode=arch=compute_80,code=compute_80
            -I${SOURCE_DIR} -I${SOURCE_DIR}/generated/${MODEL}
            ${SOURCE_DIR}/generated/${MODEL}/${src} -o ${OUT}/${MODEL}/${src}.o
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "nvcc failed on generated/${MODEL}/${src}:\n${out}${err}")
  endif()
endforeach()
message(STATUS "generated/${MODEL}: host code compiles with nvcc")
