// OpenCL through a run-time loaded libOpenCL: only the headers are needed to build.
#include "backends/opencl/opencl_device.h"

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "ir/error.h"

namespace prism {
namespace {

const char* ClErrorName(cl_int e) {
  switch (e) {
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
    case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BUILD_OPTIONS: return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "OpenCL error";
  }
}

// The entry points Prism uses, resolved by name from the loaded library.
struct ClApi {
  void* lib = nullptr;
#define PRISM_CL_FN(name) decltype(&::name) name = nullptr;
#define PRISM_CL_FNS(X)                                                                                \
  X(clGetPlatformIDs)                                                                                  \
  X(clGetPlatformInfo)                                                                                 \
  X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext) X(clReleaseContext) X(clCreateCommandQueue)  \
      X(clReleaseCommandQueue) X(clCreateBuffer) X(clReleaseMemObject) X(clEnqueueWriteBuffer)         \
          X(clEnqueueReadBuffer) X(clEnqueueFillBuffer) X(clCreateProgramWithSource) X(clBuildProgram) \
              X(clGetProgramBuildInfo) X(clReleaseProgram) X(clCreateKernel) X(clReleaseKernel)        \
                  X(clSetKernelArg) X(clEnqueueNDRangeKernel) X(clFinish) X(clWaitForEvents)           \
                      X(clGetEventProfilingInfo) X(clReleaseEvent)
  PRISM_CL_FNS(PRISM_CL_FN)
#undef PRISM_CL_FN
};

// Loads the library once per process; returns null with *why set when it is missing.
const ClApi* LoadClApi(std::string* why) {
  static std::once_flag once;
  static ClApi api;
  static std::string error;
  std::call_once(once, [] {
    for (const char* name : {"libOpenCL.so.1", "libOpenCL.so"}) {
      api.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (api.lib) break;
    }
    if (!api.lib) {
      const char* e = dlerror();
      error = std::string("cannot load libOpenCL.so.1 (") + (e ? e : "not found") + ")";
      return;
    }
#define PRISM_CL_LOAD(name)                                               \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(api.lib, #name)); \
  if (!api.name && error.empty()) error = "libOpenCL.so.1 lacks the entry point " #name;
    PRISM_CL_FNS(PRISM_CL_LOAD)
#undef PRISM_CL_LOAD
  });
  if (!error.empty()) {
    if (why) *why = error;
    return nullptr;
  }
  return &api;
}

[[noreturn]] void Fail(const std::string& what, cl_int e) {
  throw Error("opencl: " + what + " failed: " + ClErrorName(e) + " (" + std::to_string(e) + ")");
}

void Check(cl_int e, const std::string& what) {
  if (e != CL_SUCCESS) Fail(what, e);
}

std::string PlatformString(const ClApi& cl, cl_platform_id p, cl_platform_info what) {
  char buf[256] = {};
  cl.clGetPlatformInfo(p, what, sizeof(buf) - 1, buf, nullptr);
  return buf;
}

struct ClModule : GpuModule {
  const ClApi* cl = nullptr;
  cl_program program = nullptr;
  std::vector<cl_kernel> kernels;
  ~ClModule() override {
    for (cl_kernel k : kernels) cl->clReleaseKernel(k);
    if (program) cl->clReleaseProgram(program);
  }
};

cl_mem AsMem(GpuMem m) { return reinterpret_cast<cl_mem>(static_cast<uintptr_t>(m)); }

}  // namespace

struct OpenClDevice::Impl {
  const ClApi* cl = nullptr;
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  std::string name;
  int max_group = 1;
  std::vector<cl_event>* timed = nullptr;  // set inside TimeMs: launches record their events here
};

// Finds the first device of the first platform that has one, or explains why there is none.
static std::unique_ptr<OpenClDevice::Impl> Probe(std::string* why) {
  const ClApi* cl = LoadClApi(why);
  if (!cl) return nullptr;
  cl_uint np = 0;
  cl_int e = cl->clGetPlatformIDs(0, nullptr, &np);
  if (e != CL_SUCCESS || np == 0) {
    *why = "the ICD loader lists no platform (" +
           std::string(e == CL_SUCCESS ? "0 platforms" : ClErrorName(e)) + ")";
    return nullptr;
  }
  std::vector<cl_platform_id> platforms(np);
  cl->clGetPlatformIDs(np, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    auto impl = std::make_unique<OpenClDevice::Impl>();
    impl->cl = cl;
    impl->platform = p;
    cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &impl->device, nullptr);
    char name[256] = {};
    cl->clGetDeviceInfo(impl->device, CL_DEVICE_NAME, sizeof(name) - 1, name, nullptr);
    impl->name = PlatformString(*cl, p, CL_PLATFORM_NAME) + ": " + name;
    size_t max_group = 1;
    cl->clGetDeviceInfo(impl->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(max_group), &max_group, nullptr);
    impl->max_group = (int)std::min<size_t>(max_group, 1 << 20);
    return impl;
  }
  *why = std::to_string(np) + " platform(s) but no device";
  return nullptr;
}

bool OpenClDevice::Available(std::string* why) {
  std::string reason;
  bool ok = Probe(&reason) != nullptr;
  if (why) *why = ok ? "" : "no OpenCL platform found: " + reason;
  return ok;
}

std::shared_ptr<OpenClDevice> OpenClDevice::Open() {
  std::string why;
  std::unique_ptr<Impl> impl = Probe(&why);
  if (!impl) throw Error("no OpenCL platform found: " + why);
  const ClApi& cl = *impl->cl;
  cl_int e = CL_SUCCESS;
  impl->context = cl.clCreateContext(nullptr, 1, &impl->device, nullptr, nullptr, &e);
  Check(e, "clCreateContext");
  // Profiling on: TimeMs reads kernels' device timestamps (the overhead is per-event bookkeeping).
  impl->queue = cl.clCreateCommandQueue(impl->context, impl->device, CL_QUEUE_PROFILING_ENABLE, &e);
  if (e != CL_SUCCESS) {
    cl.clReleaseContext(impl->context);
    Fail("clCreateCommandQueue", e);
  }
  return std::shared_ptr<OpenClDevice>(new OpenClDevice(std::move(impl)));
}

OpenClDevice::OpenClDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

OpenClDevice::~OpenClDevice() {
  const ClApi& cl = *impl_->cl;
  cl.clFinish(impl_->queue);
  cl.clReleaseCommandQueue(impl_->queue);
  cl.clReleaseContext(impl_->context);
}

std::string OpenClDevice::name() const { return impl_->name; }
int OpenClDevice::max_threads_per_group() const { return impl_->max_group; }

GpuMem OpenClDevice::Alloc(size_t bytes) {
  const ClApi& cl = *impl_->cl;
  size_t size = std::max<size_t>((bytes + 3) / 4 * 4, 4);  // OpenCL buffers cannot be empty
  cl_int e = CL_SUCCESS;
  cl_mem m = cl.clCreateBuffer(impl_->context, CL_MEM_READ_WRITE, size, nullptr, &e);
  Check(e, "clCreateBuffer of " + std::to_string(size) + " bytes");
  cl_uint zero = 0;
  e = cl.clEnqueueFillBuffer(impl_->queue, m, &zero, sizeof(zero), 0, size, 0, nullptr, nullptr);
  if (e != CL_SUCCESS) {
    cl.clReleaseMemObject(m);
    Fail("clEnqueueFillBuffer", e);
  }
  return static_cast<GpuMem>(reinterpret_cast<uintptr_t>(m));
}

void OpenClDevice::Free(GpuMem m) {
  if (m) impl_->cl->clReleaseMemObject(AsMem(m));
}

void OpenClDevice::UploadAt(GpuMem dst, size_t offset, const void* src, size_t bytes) {
  if (bytes == 0) return;
  Check(impl_->cl->clEnqueueWriteBuffer(impl_->queue, AsMem(dst), CL_TRUE, offset, bytes, src, 0, nullptr,
                                        nullptr),
        "clEnqueueWriteBuffer");
}

void OpenClDevice::DownloadAt(void* dst, GpuMem src, size_t offset, size_t bytes) {
  if (bytes == 0) return;
  Check(impl_->cl->clEnqueueReadBuffer(impl_->queue, AsMem(src), CL_TRUE, offset, bytes, dst, 0, nullptr,
                                       nullptr),
        "clEnqueueReadBuffer");
}

std::unique_ptr<GpuModule> OpenClDevice::Compile(const std::string& source,
                                                 const std::vector<std::string>& functions) {
  const ClApi& cl = *impl_->cl;
  auto m = std::make_unique<ClModule>();
  m->cl = impl_->cl;
  const char* text = source.c_str();
  size_t len = source.size();
  cl_int e = CL_SUCCESS;
  m->program = cl.clCreateProgramWithSource(impl_->context, 1, &text, &len, &e);
  Check(e, "clCreateProgramWithSource");
  std::string options = "-cl-std=CL1.2";
  if (const char* extra = std::getenv("PRISM_OPENCL_OPTIONS"); extra && *extra)
    options += std::string(" ") + extra;
  e = cl.clBuildProgram(m->program, 1, &impl_->device, options.c_str(), nullptr, nullptr);
  if (e != CL_SUCCESS) {
    size_t n = 0;
    cl.clGetProgramBuildInfo(m->program, impl_->device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    cl.clGetProgramBuildInfo(m->program, impl_->device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    throw Error("opencl: clBuildProgram failed: " + std::string(ClErrorName(e)) + "\n" + log);
  }
  for (const std::string& f : functions) {
    cl_kernel k = cl.clCreateKernel(m->program, f.c_str(), &e);
    if (e != CL_SUCCESS) Fail("clCreateKernel '" + f + "'", e);
    m->kernels.push_back(k);
  }
  return m;
}

void OpenClDevice::Launch(GpuModule& module, int function, const std::vector<GpuArg>& args, int64_t groups,
                          int threads) {
  const ClApi& cl = *impl_->cl;
  cl_kernel k = static_cast<ClModule&>(module).kernels.at(function);
  for (size_t a = 0; a < args.size(); ++a) {
    cl_int e;
    if (args[a].is_buffer) {
      cl_mem m = AsMem(args[a].mem);
      e = cl.clSetKernelArg(k, (cl_uint)a, sizeof(cl_mem), &m);
    } else {
      cl_long v = args[a].value;
      e = cl.clSetKernelArg(k, (cl_uint)a, sizeof(cl_long), &v);
    }
    if (e != CL_SUCCESS) Fail("clSetKernelArg " + std::to_string(a), e);
  }
  size_t local = (size_t)threads, global = (size_t)groups * local;
  cl_event ev = nullptr;
  Check(cl.clEnqueueNDRangeKernel(impl_->queue, k, 1, nullptr, &global, &local, 0, nullptr,
                                  impl_->timed ? &ev : nullptr),
        "clEnqueueNDRangeKernel");
  if (impl_->timed) impl_->timed->push_back(ev);
}

double OpenClDevice::TimeMs(const std::function<void()>& work) {
  const ClApi& cl = *impl_->cl;
  std::vector<cl_event> events;
  auto release = [&] {
    impl_->timed = nullptr;
    for (cl_event ev : events) cl.clReleaseEvent(ev);
  };
  impl_->timed = &events;
  try {
    work();
    impl_->timed = nullptr;
    double ms = 0;
    if (!events.empty()) {
      Check(cl.clWaitForEvents((cl_uint)events.size(), events.data()), "clWaitForEvents");
      cl_ulong first = ~(cl_ulong)0, last = 0;
      for (cl_event ev : events) {
        cl_ulong start = 0, end = 0;
        Check(cl.clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr),
              "clGetEventProfilingInfo");
        Check(cl.clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr),
              "clGetEventProfilingInfo");
        first = std::min(first, start);
        last = std::max(last, end);
      }
      ms = (double)(last - first) * 1e-6;
    }
    release();
    return ms;
  } catch (...) {
    release();
    throw;
  }
}

void OpenClDevice::Finish() { Check(impl_->cl->clFinish(impl_->queue), "clFinish"); }

}  // namespace prism
