# ctest script: the host code of generated/${MODEL} and of each of its tensor-parallel builds
# (tp<N>/) compiles: forward.cu (the launch sequences) with nvcc, forward_ref.cpp and model.cpp
# with the C++ compiler ${CXX}, as a build of the model compiles them (nvcc took 5 s a file there,
# four times the C++ compiler's). Fails on any error.
file(GLOB rank_builds RELATIVE ${SOURCE_DIR}/generated/${MODEL} ${SOURCE_DIR}/generated/${MODEL}/tp*)
foreach(folder . ${rank_builds})
  set(dir ${SOURCE_DIR}/generated/${MODEL}/${folder})
  set(out ${OUT}/${MODEL}/${folder})
  file(MAKE_DIRECTORY ${out})
  set(includes -I${SOURCE_DIR} -I${dir} -I${CUDA_INCLUDE})
  foreach(src forward.cu forward_ref.cpp model.cpp)
    if(src MATCHES "\\.cu$")
      set(compile ${NVCC} -c -std=c++20 -gencode=arch=compute_80,code=compute_80)
    else()
      set(compile ${CXX} -c -std=c++20 -O0)
    endif()
    execute_process(COMMAND ${compile} ${includes} ${dir}/${src} -o ${out}/${src}.o
                    RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "${compile} failed on generated/${MODEL}/${folder}/${src}:\n${output}${errors}")
    endif()
  endforeach()
endforeach()
message(STATUS "generated/${MODEL}: host code compiles")
