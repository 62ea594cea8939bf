# Sourced by the GPU machine's scripts: puts a libnccl.so.2 on LD_LIBRARY_PATH when the dynamic
# linker finds none (the toolkit there may lack NCCL; PyTorch's nvidia-nccl wheel has it).
if ! ldconfig -p 2>/dev/null | grep -q "libnccl.so.2" && [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
  [ -n "$nccl_lib" ] && export LD_LIBRARY_PATH="$nccl_lib:${LD_LIBRARY_PATH:-}"
fi
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
