// The module's C ABI for communication heaps (mpk_runtime/run/transport.py): device memory that the
// other ranks of the host map as peer memory through CUDA IPC. Allocation, export, mapping and
// release only; the handles travel between the processes through MPI, on the Python side.
#pragma once
#include <cuda_runtime.h>
#include <string.h>

extern "C" {

// Allocates `bytes` of zeroed device memory on `device` and, with `handle` (64 bytes, a
// cudaIpcMemHandle_t) not null, exports it.
int mpk_comm_alloc(int device, unsigned long long bytes, void **ptr, void *handle, char *err, int errlen) {
  *ptr = nullptr;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaMalloc(ptr, bytes);
  if (e == cudaSuccess) e = cudaMemset(*ptr, 0, bytes);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess && handle) {
    cudaIpcMemHandle_t h;
    e = cudaIpcGetMemHandle(&h, *ptr);
    if (e == cudaSuccess) memcpy(handle, &h, sizeof h);
  }
  if (e != cudaSuccess) {
    if (*ptr) cudaFree(*ptr);
    *ptr = nullptr;
    return mpk::host::fail(err, errlen, "allocating the communication heap", e);
  }
  return 0;
}

// Maps another rank's exported heap into this process (peer access enabled on first use).
int mpk_comm_open(int device, void const *handle, void **ptr, char *err, int errlen) {
  static_assert(sizeof(cudaIpcMemHandle_t) == 64, "a CUDA IPC handle is 64 bytes");
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess)
    return mpk::host::fail(err, errlen, "mapping a peer's communication heap (cudaIpcOpenMemHandle)", e);
  return 0;
}

// Unmaps a peer's heap (mpk_comm_open) or frees this rank's own (mpk_comm_alloc).
int mpk_comm_release(int device, void *ptr, int own, char *err, int errlen) {
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = own ? cudaFree(ptr) : cudaIpcCloseMemHandle(ptr);
  if (e != cudaSuccess) return mpk::host::fail(err, errlen, own ? "cudaFree" : "cudaIpcCloseMemHandle", e);
  return 0;
}

}  // extern "C"
