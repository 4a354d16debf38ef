// The CUDA driver API through dlopen. The ABI pieces used are declared here (handles are opaque
// pointers, results ints), so building needs no CUDA toolkit and running needs no GPU.
//
// UNEXERCISED beyond the "not found" paths: see cuda_device.h.
#include "backends/cuda/cuda_device.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "backends/cuda/cublas_loader.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "ir/error.h"

namespace prism {
namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctxOpaque*;
using CUmodule = struct CUmodOpaque*;
using CUfunction = struct CUfuncOpaque*;
using CUstream = struct CUstreamOpaque*;
using CUevent = struct CUeventOpaque*;
using CUgraph = struct CUgraphOpaque*;
using CUgraphExec = struct CUgraphExecOpaque*;
using CUgraphNode = struct CUgraphNodeOpaque*;

// CUDA_KERNEL_NODE_PARAMS_v2 as in cuda.h (12.0+); the _v1 entry points read only the fields
// before `kern`, so the same struct serves both.
struct CuKernelNodeParams {
  CUfunction func = nullptr;
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
  void** params = nullptr;
  void** extra = nullptr;
  void* kern = nullptr;  // CUkernel
  CUcontext ctx = nullptr;
};

constexpr int kAttrMaxThreadsPerBlock = 1;
constexpr int kAttrComputeMajor = 75;
constexpr int kAttrComputeMinor = 76;
constexpr int kCaptureModeThreadLocal = 1;

struct CuApi {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;  // _v2
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;  // _v2
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;                // _v2
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;                          // _v2
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;  // _v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;  // _v2
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;        // _v2
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;  // _v2
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;  // _v2 where present
  CUresult (*cuStreamBeginCapture)(CUstream, int) = nullptr;           // _v2
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  CUresult (*cuGraphCreate)(CUgraph*, unsigned) = nullptr;
  CUresult (*cuGraphAddKernelNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                   const CuKernelNodeParams*) = nullptr;  // _v2 where present
  CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                             const CuKernelNodeParams*) = nullptr;  // _v2 where present
};

struct LoadedCu {
  CuApi api;
  std::string error;
};

const LoadedCu& LoadCu() {
  static std::once_flag once;
  static LoadedCu l;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      l.error = std::string("cannot load libcuda.so.1 (") + (e ? e : "not found") + ")";
      return;
    }
    auto sym = [&](const char* a, const char* b = nullptr) -> void* {
      void* p = dlsym(lib, a);
      if (!p && b) p = dlsym(lib, b);
      if (!p && l.error.empty()) l.error = std::string("libcuda.so.1 lacks ") + a;
      return p;
    };
    CuApi& c = l.api;
#define PRISM_CU(field, ...) c.field = reinterpret_cast<decltype(c.field)>(sym(__VA_ARGS__));
    PRISM_CU(cuInit, "cuInit")
    PRISM_CU(cuGetErrorName, "cuGetErrorName")
    PRISM_CU(cuDeviceGetCount, "cuDeviceGetCount")
    PRISM_CU(cuDeviceGet, "cuDeviceGet")
    PRISM_CU(cuDeviceGetName, "cuDeviceGetName")
    PRISM_CU(cuDeviceGetAttribute, "cuDeviceGetAttribute")
    PRISM_CU(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
    PRISM_CU(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")
    PRISM_CU(cuCtxSetCurrent, "cuCtxSetCurrent")
    PRISM_CU(cuStreamCreate, "cuStreamCreate")
    PRISM_CU(cuStreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy")
    PRISM_CU(cuStreamSynchronize, "cuStreamSynchronize")
    PRISM_CU(cuMemAlloc, "cuMemAlloc_v2")
    PRISM_CU(cuMemFree, "cuMemFree_v2")
    PRISM_CU(cuMemsetD8, "cuMemsetD8_v2")
    PRISM_CU(cuMemcpyHtoD, "cuMemcpyHtoD_v2")
    PRISM_CU(cuMemcpyDtoH, "cuMemcpyDtoH_v2")
    PRISM_CU(cuModuleLoadData, "cuModuleLoadData")
    PRISM_CU(cuModuleUnload, "cuModuleUnload")
    PRISM_CU(cuModuleGetFunction, "cuModuleGetFunction")
    PRISM_CU(cuLaunchKernel, "cuLaunchKernel")
    PRISM_CU(cuEventCreate, "cuEventCreate")
    PRISM_CU(cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy")
    PRISM_CU(cuEventRecord, "cuEventRecord")
    PRISM_CU(cuEventSynchronize, "cuEventSynchronize")
    PRISM_CU(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime")
    PRISM_CU(cuStreamBeginCapture, "cuStreamBeginCapture_v2")
    PRISM_CU(cuStreamEndCapture, "cuStreamEndCapture")
    PRISM_CU(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")
    PRISM_CU(cuGraphLaunch, "cuGraphLaunch")
    PRISM_CU(cuGraphExecDestroy, "cuGraphExecDestroy")
    PRISM_CU(cuGraphDestroy, "cuGraphDestroy")
    PRISM_CU(cuGraphCreate, "cuGraphCreate")
    PRISM_CU(cuGraphAddKernelNode, "cuGraphAddKernelNode_v2", "cuGraphAddKernelNode")
    PRISM_CU(cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2",
             "cuGraphExecKernelNodeSetParams")
#undef PRISM_CU
  });
  return l;
}

std::string ErrName(const CuApi& c, CUresult r) {
  const char* s = nullptr;
  if (c.cuGetErrorName && c.cuGetErrorName(r, &s) == 0 && s) return s;
  return "CUDA error " + std::to_string(r);
}

struct CuModule : GpuModule {
  const CuApi* cu = nullptr;
  CUmodule module = nullptr;
  std::vector<CUfunction> functions;
  ~CuModule() override {
    if (module) cu->cuModuleUnload(module);
  }
};

}  // namespace

struct CudaDevice::Impl {
  const CuApi* cu = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::string name;
  int major = 0, minor = 0, max_threads = 1024;
  // The library GEMM tier, set up on first use.
  bool cublas_tried = false;
  const CublasApi* cublas_api = nullptr;
  void* cublas = nullptr;  // cublasHandle_t bound to `stream`; null: unavailable (cublas_error says why)
  std::string cublas_error;
  std::unique_ptr<GpuModule> convert;  // CublasConvertSource()'s kernels
  CUdeviceptr scratch = 0;             // activations converted to bf16/f16
  size_t scratch_bytes = 0;

  void Check(CUresult r, const std::string& what) const {
    if (r != 0) throw Error("cuda: " + what + " failed: " + ErrName(*cu, r));
  }
  void* Cublas(std::string* why) {
    if (!cublas_tried) {
      cublas_tried = true;
      std::string e;
      const CublasApi* api = LoadCublas(&e);
      void* h = nullptr;
      if (!api) {
        cublas_error = e;
      } else if (cu->cuCtxSetCurrent(context) != 0) {
        cublas_error = "cuCtxSetCurrent failed before cublasCreate";
      } else if (int st = api->create(&h); st != 0) {
        cublas_error = api->library + ": cublasCreate_v2 failed: " + CublasStatusName(st);
      } else if (int st2 = api->set_stream(h, stream); st2 != 0) {
        api->destroy(h);
        cublas_error = api->library + ": cublasSetStream_v2 failed: " + CublasStatusName(st2);
      } else {
        cublas_api = api;
        cublas = h;
      }
    }
    if (!cublas && why) *why = cublas_error;
    return cublas;
  }
};

// The device, or nullptr with *why set; the context is not created here.
static std::unique_ptr<CudaDevice::Impl> ProbeCuda(int ordinal, std::string* why) {
  const LoadedCu& l = LoadCu();
  if (!l.error.empty()) {
    *why = l.error;
    return nullptr;
  }
  const CuApi& c = l.api;
  if (CUresult r = c.cuInit(0); r != 0) {
    *why = "cuInit: " + ErrName(c, r);
    return nullptr;
  }
  int count = 0;
  if (CUresult r = c.cuDeviceGetCount(&count); r != 0 || count <= ordinal) {
    *why = r ? "cuDeviceGetCount: " + ErrName(c, r)
             : std::to_string(count) + " device(s), wanted #" + std::to_string(ordinal);
    return nullptr;
  }
  auto impl = std::make_unique<CudaDevice::Impl>();
  impl->cu = &c;
  impl->Check(c.cuDeviceGet(&impl->device, ordinal), "cuDeviceGet");
  char name[256] = {};
  c.cuDeviceGetName(name, sizeof(name) - 1, impl->device);
  impl->name = name;
  c.cuDeviceGetAttribute(&impl->major, kAttrComputeMajor, impl->device);
  c.cuDeviceGetAttribute(&impl->minor, kAttrComputeMinor, impl->device);
  c.cuDeviceGetAttribute(&impl->max_threads, kAttrMaxThreadsPerBlock, impl->device);
  return impl;
}

bool CudaDevice::Available(std::string* why) {
  std::string reason;
  bool ok = ProbeCuda(0, &reason) != nullptr;
  if (why) *why = ok ? "" : "no CUDA driver/GPU found: " + reason;
  return ok;
}

std::shared_ptr<CudaDevice> CudaDevice::Open(int ordinal) {
  std::string why;
  std::unique_ptr<Impl> impl = ProbeCuda(ordinal, &why);
  if (!impl) throw Error("no CUDA driver/GPU found: " + why);
  const CuApi& c = *impl->cu;
  impl->Check(c.cuDevicePrimaryCtxRetain(&impl->context, impl->device), "cuDevicePrimaryCtxRetain");
  impl->Check(c.cuCtxSetCurrent(impl->context), "cuCtxSetCurrent");
  impl->Check(c.cuStreamCreate(&impl->stream, 0), "cuStreamCreate");
  return std::shared_ptr<CudaDevice>(new CudaDevice(std::move(impl)));
}

CudaDevice::CudaDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaDevice::~CudaDevice() {
  const CuApi& c = *impl_->cu;
  c.cuStreamSynchronize(impl_->stream);
  if (impl_->cublas) impl_->cublas_api->destroy(impl_->cublas);
  impl_->convert.reset();
  if (impl_->scratch) c.cuMemFree(impl_->scratch);
  c.cuStreamDestroy(impl_->stream);
  c.cuDevicePrimaryCtxRelease(impl_->device);
}

std::string CudaDevice::name() const { return impl_->name; }
int CudaDevice::max_threads_per_group() const { return impl_->max_threads; }
std::string CudaDevice::arch() const {
  return "sm_" + std::to_string(impl_->major) + std::to_string(impl_->minor);
}

GpuMem CudaDevice::Alloc(size_t bytes) {
  CUdeviceptr p = 0;
  size_t size = std::max<size_t>(bytes, 4);
  impl_->Check(impl_->cu->cuMemAlloc(&p, size), "cuMemAlloc of " + std::to_string(size) + " bytes");
  impl_->Check(impl_->cu->cuMemsetD8(p, 0, size), "cuMemsetD8");
  return p;
}

void CudaDevice::Free(GpuMem m) {
  if (m) impl_->cu->cuMemFree(m);
}

void CudaDevice::UploadAt(GpuMem dst, size_t offset, const void* src, size_t bytes) {
  if (bytes) impl_->Check(impl_->cu->cuMemcpyHtoD(dst + offset, src, bytes), "cuMemcpyHtoD");
}

void CudaDevice::DownloadAt(void* dst, GpuMem src, size_t offset, size_t bytes) {
  if (bytes) impl_->Check(impl_->cu->cuMemcpyDtoH(dst, src + offset, bytes), "cuMemcpyDtoH");
}

std::unique_ptr<GpuModule> CudaDevice::Compile(const std::string& source,
                                               const std::vector<std::string>& functions) {
  NvrtcOutput out = NvrtcCompiler::Open().Compile(source, arch());
  auto m = std::make_unique<CuModule>();
  m->cu = impl_->cu;
  impl_->Check(impl_->cu->cuModuleLoadData(&m->module, out.image.data()), "cuModuleLoadData");
  for (const std::string& f : functions) {
    CUfunction fn = nullptr;
    impl_->Check(impl_->cu->cuModuleGetFunction(&fn, m->module, f.c_str()),
                 "cuModuleGetFunction '" + f + "'");
    m->functions.push_back(fn);
  }
  return m;
}

// Every kernel argument is 8 bytes: a device pointer or an int64 symbol value.
static void PackArgs(const std::vector<GpuArg>& args, std::vector<unsigned long long>& values,
                     std::vector<void*>& params) {
  values.resize(args.size());
  params.resize(args.size());
  for (size_t a = 0; a < args.size(); ++a) {
    values[a] = args[a].is_buffer ? args[a].mem : (unsigned long long)args[a].value;
    params[a] = &values[a];
  }
}

static void CheckGrid(int64_t groups) {
  if (groups > 0x7fffffff) throw Error("cuda: grid of " + std::to_string(groups) + " blocks is too large");
}

void CudaDevice::Launch(GpuModule& module, int function, const std::vector<GpuArg>& args, int64_t groups,
                        int threads) {
  CUfunction fn = static_cast<CuModule&>(module).functions.at(function);
  std::vector<unsigned long long> values;
  std::vector<void*> params;
  PackArgs(args, values, params);
  CheckGrid(groups);
  impl_->Check(impl_->cu->cuLaunchKernel(fn, (unsigned)groups, 1, 1, (unsigned)threads, 1, 1, 0,
                                         impl_->stream, params.data(), nullptr),
               "cuLaunchKernel");
}

void CudaDevice::Finish() {
  impl_->Check(impl_->cu->cuStreamSynchronize(impl_->stream), "cuStreamSynchronize");
}

bool CudaDevice::LibraryGemmAvailable(DType w_dtype, std::string* why) const {
  std::string reason;
  if (!CublasGemmTakes(w_dtype))
    reason = "cuBLAS tier takes f32, bf16 and f16 weights, not " + std::string(DTypeName(w_dtype));
  else if (impl_->Cublas(&reason))
    return true;
  if (why) *why = reason;
  return false;
}

void CudaDevice::LibraryGemm(const GpuLibraryGemm& g) {
  std::string why;
  if (!LibraryGemmAvailable(g.w_dtype, &why)) throw Error("cuda: no library GEMM: " + why);
  CublasGemmCall call = CublasRowMajorGemm(g.w_dtype, g.m, g.n, g.k);
  if (g.m == 0 || g.n == 0) return;
  GpuMem b = g.a;
  if (g.w_dtype != DType::F32) {  // cuBLAS takes A and B of one type: a goes to w's
    const int64_t count = g.m * g.k;
    const size_t bytes = (size_t)std::max<int64_t>(count, 1) * 2;
    if (impl_->scratch_bytes < bytes) {
      Finish();  // earlier GEMMs may still read the old scratch
      if (impl_->scratch) impl_->cu->cuMemFree(impl_->scratch);
      impl_->scratch = 0;
      impl_->scratch_bytes = 0;
      impl_->scratch = Alloc(bytes);
      impl_->scratch_bytes = bytes;
    }
    if (!impl_->convert)
      impl_->convert = Compile(GpuRenderer(GpuDialect::Cuda).Prelude() + CublasConvertSource(),
                               {CublasConvertName(DType::BF16), CublasConvertName(DType::F16)});
    if (count > 0)
      Launch(*impl_->convert, g.w_dtype == DType::BF16 ? 0 : 1,
             {GpuArg::Buffer(impl_->scratch), GpuArg::Buffer(g.a), GpuArg::Int(count)},
             std::min<int64_t>((count + 255) / 256, 65536), 256);
    b = impl_->scratch;
  }
  const float alpha = 1.0f, beta = 0.0f;  // host pointer mode (the default): read during the call
  auto ptr = [](GpuMem m) { return reinterpret_cast<void*>((uintptr_t)m); };
  int st = impl_->cublas_api->gemm_ex(impl_->cublas, call.transa, call.transb, call.m, call.n, call.k, &alpha,
                                      ptr(g.w), call.a_type, call.lda, ptr(b), call.b_type, call.ldb, &beta,
                                      ptr(g.out), call.c_type, call.ldc, call.compute, kCublasGemmDefault);
  if (st != 0)
    throw Error("cuda: cublasGemmEx (M " + std::to_string(g.m) + ", N " + std::to_string(g.n) + ", K " +
                std::to_string(g.k) + ", " + std::string(DTypeName(g.w_dtype)) +
                " weights) failed: " + CublasStatusName(st));
}

double CudaDevice::TimeMs(const std::function<void()>& work) {
  const CuApi& c = *impl_->cu;
  CUevent start = nullptr, stop = nullptr;
  impl_->Check(c.cuEventCreate(&start, 0), "cuEventCreate");
  impl_->Check(c.cuEventCreate(&stop, 0), "cuEventCreate");
  float ms = 0;
  try {
    impl_->Check(c.cuEventRecord(start, impl_->stream), "cuEventRecord");
    work();
    impl_->Check(c.cuEventRecord(stop, impl_->stream), "cuEventRecord");
    impl_->Check(c.cuEventSynchronize(stop), "cuEventSynchronize");
    impl_->Check(c.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
  } catch (...) {
    c.cuEventDestroy(start);
    c.cuEventDestroy(stop);
    throw;
  }
  c.cuEventDestroy(start);
  c.cuEventDestroy(stop);
  return ms;
}

std::unique_ptr<CudaDevice::CapturedGraph> CudaDevice::Capture(const std::function<void()>& work) {
  const CuApi& c = *impl_->cu;
  impl_->Check(c.cuStreamBeginCapture(impl_->stream, kCaptureModeThreadLocal), "cuStreamBeginCapture");
  CUgraph graph = nullptr;
  try {
    work();
  } catch (...) {
    c.cuStreamEndCapture(impl_->stream, &graph);
    if (graph) c.cuGraphDestroy(graph);
    throw;
  }
  impl_->Check(c.cuStreamEndCapture(impl_->stream, &graph), "cuStreamEndCapture");
  auto g = std::unique_ptr<CapturedGraph>(new CapturedGraph());
  g->dev_ = this;
  g->graph_ = graph;
  CUgraphExec exec = nullptr;
  impl_->Check(c.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate");
  g->exec_ = exec;
  return g;
}

CudaDevice::CapturedGraph::~CapturedGraph() {
  if (!dev_) return;
  const CuApi& c = *dev_->impl_->cu;
  if (exec_) c.cuGraphExecDestroy(static_cast<CUgraphExec>(exec_));
  if (graph_) c.cuGraphDestroy(static_cast<CUgraph>(graph_));
}

void CudaDevice::CapturedGraph::Replay() {
  dev_->impl_->Check(dev_->impl_->cu->cuGraphLaunch(static_cast<CUgraphExec>(exec_), dev_->impl_->stream),
                     "cuGraphLaunch");
}

// The decode step as a CUDA graph. Kernel arguments bake in the symbol values (`past` grows every
// step) and the attention kernels' grids grow with it, so a graph frozen at record time would be
// wrong one step later. Three ways out: re-capture each step and cuGraphExecUpdate (a capture
// costs about what the launches it replaces cost); pass symbols through a device-side buffer and
// launch grids sized for the whole context (changes every kernel's signature in both dialects and
// launches idle blocks); or keep one instantiated graph and rewrite the parameters of the nodes
// whose arguments or grid changed with cuGraphExecKernelNodeSetParams before each replay (documented
// to affect only later launches, keeping the function and the topology). This takes the last:
// correct for any symbol values, nothing changes for OpenCL. The graph is built node by node
// (cuGraphAddKernelNode, each node depending on the one before, as stream order would) rather than
// by stream capture so that node i is known to be launch i. Cost, unmeasured (no GPU here): every
// kernel receives every size symbol, so a decode step rewrites every node (one host call each, in
// place of one launch each) and then makes a single cuGraphLaunch; passing each kernel only the
// symbols it reads would leave most nodes untouched between steps.
namespace {
struct CuLaunchGraph : GpuLaunchGraph {
  CudaDevice::Impl* impl = nullptr;
  CuModule* module = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  std::vector<CUgraphNode> nodes;
  std::vector<GpuLaunchParams> current;  // what each node runs with now
  ~CuLaunchGraph() override;
  size_t size() const override { return nodes.size(); }
  void Set(size_t i, const GpuLaunchParams& p) override;
  void Replay() override;
};

CuKernelNodeParams NodeParams(const CuModule& m, const GpuLaunchParams& p,
                              std::vector<unsigned long long>& values, std::vector<void*>& params) {
  CheckGrid(p.groups);
  PackArgs(p.args, values, params);
  CuKernelNodeParams np;
  np.func = m.functions.at(p.function);
  np.grid_x = (unsigned)p.groups;
  np.block_x = (unsigned)p.threads;
  np.params = params.data();  // copied by the driver when the node is added or set
  return np;
}
}  // namespace

std::unique_ptr<GpuLaunchGraph> CudaDevice::RecordGraph(GpuModule& module,
                                                        const std::vector<GpuLaunchParams>& launches) {
  const CuApi& c = *impl_->cu;
  auto g = std::make_unique<CuLaunchGraph>();
  g->impl = impl_.get();
  g->module = &static_cast<CuModule&>(module);
  impl_->Check(c.cuGraphCreate(&g->graph, 0), "cuGraphCreate");
  std::vector<unsigned long long> values;
  std::vector<void*> params;
  for (const GpuLaunchParams& l : launches) {
    CuKernelNodeParams np = NodeParams(*g->module, l, values, params);
    CUgraphNode node = nullptr;
    const CUgraphNode* dep = g->nodes.empty() ? nullptr : &g->nodes.back();
    impl_->Check(c.cuGraphAddKernelNode(&node, g->graph, dep, dep ? 1 : 0, &np), "cuGraphAddKernelNode");
    g->nodes.push_back(node);
  }
  impl_->Check(c.cuGraphInstantiateWithFlags(&g->exec, g->graph, 0), "cuGraphInstantiate");
  g->current = launches;
  return g;
}

CuLaunchGraph::~CuLaunchGraph() {
  if (exec) impl->cu->cuGraphExecDestroy(exec);
  if (graph) impl->cu->cuGraphDestroy(graph);
}

void CuLaunchGraph::Set(size_t i, const GpuLaunchParams& p) {
  if (current.at(i) == p) return;
  if (p.function != current[i].function)
    throw Error("cuda graph: launch " + std::to_string(i) + " changed function");
  std::vector<unsigned long long> values;
  std::vector<void*> params;
  CuKernelNodeParams np = NodeParams(*module, p, values, params);
  impl->Check(impl->cu->cuGraphExecKernelNodeSetParams(exec, nodes[i], &np),
              "cuGraphExecKernelNodeSetParams");
  current[i] = p;
}

void CuLaunchGraph::Replay() { impl->Check(impl->cu->cuGraphLaunch(exec, impl->stream), "cuGraphLaunch"); }

}  // namespace prism
