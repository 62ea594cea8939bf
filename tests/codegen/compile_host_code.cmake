# ctest script: nvcc compiles the host code of generated/${MODEL} (forward.cu: the launch
# sequences; forward_ref.cpp and model.cpp through nvcc's host compiler), and of each of its
# tensor-parallel builds (tp<N>/). Fails on any error.
file(GLOB rank_builds RELATIVE ${SOURCE_DIR}/generated/${MODEL} ${SOURCE_DIR}/generated/${MODEL}/tp*)
foreach(folder . ${rank_builds})
  file(MAKE_DIRECTORY ${OUT}/${MODEL}/${folder})
  foreach(src forward.cu forward_ref.cpp model.cpp)
    execute_process(
      COMMAND ${NVCC} -c -std=c++20 -x cu -gencode=arch=compute_80,code=compute_80
              -I${SOURCE_DIR} -I${SOURCE_DIR}/generated/${MODEL}/${folder}
              ${SOURCE_DIR}/generated/${MODEL}/${folder}/${src} -o ${OUT}/${MODEL}/${folder}/${src}.o
      RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "nvcc failed on generated/${MODEL}/${folder}/${src}:\n${out}${err}")
    endif()
  endforeach()
endforeach()
message(STATUS "generated/${MODEL}: host code compiles with nvcc")
