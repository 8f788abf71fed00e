#include "headroom/examples/common/run_summary.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "headroom/config.h"
#include "headroom/core/threading.h"
#include "headroom/examples/common/model_options.h"
#if HEADROOM_HAS_MPI
#include "headroom/distributed/mpi.h"
#endif
#if HEADROOM_HAS_NCCL
#include "headroom/distributed/nccl.h"
#endif

namespace headroom::examples {

namespace {

#if HEADROOM_HAS_MPI
// Ranks on CUDA talk through NCCL, one GPU each; --device cuda (no index)
// picks the rank's GPU on its machine.
std::shared_ptr<Communicator> cuda_ranks(std::shared_ptr<Communicator> world, TrainOptions& options) {
#if HEADROOM_HAS_NCCL
  if (options.device == "cuda") options.device = local_cuda_device().str();
  return nccl_world(std::move(world), Device::parse(options.device));
#else
  HEADROOM_FAIL("[train] --device ", options.device, " on ", world->size(),
                " ranks needs the NCCL part (headroom::nccl), which this build lacks; see docs/distributed.md");
#endif
}
#endif

// The job's ranks when mpirun or srun started this process, else null; the
// stdout of ranks past 0 is discarded (rank 0 speaks for the run).
std::shared_ptr<Communicator> launch_communicator(TrainOptions& options) {
#if HEADROOM_HAS_MPI
  if (!launched_by_mpi()) return nullptr;
  std::shared_ptr<Communicator> world = mpi_world();
  if (world->rank() > 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
    HEADROOM_FAIL("[train] rank ", world->rank(), " cannot discard its stdout");
  if (world->size() > 1 && Device::parse(options.device).is_cuda()) return cuda_ranks(world, options);
  return world;
#else
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* size = std::getenv(variable);
    HEADROOM_CHECK(size == nullptr || std::string(size) == "1", "[train] started as one of ", size,
                   " MPI ranks, but this build has no MPI part (headroom::mpi): install libopenmpi-dev and "
                   "rebuild, see docs/distributed.md");
  }
  return nullptr;
#endif
}

// A failure on one rank of several ends them all: the others may wait in a
// collective for it.
void end_job_on_failure(const std::shared_ptr<Communicator>& world, int status) {
#if HEADROOM_HAS_MPI
  if (world && world->size() > 1 && status != 0 && status != 130) {
    std::fflush(stdout), std::fflush(stderr);
    mpi_abort(status);
  }
#endif
}

}  // namespace

double RunSummary::metric(const std::string& name) const {
  for (const auto& [key, value] : eval)
    if (key == name) return value;
  HEADROOM_FAIL("[RunSummary] the ", task, " run has no metric '", name, "'");
}

RunSummary summarize(const std::string& task, const Module& model, const ModelConfig& config,
                     const TrainOptions& options, const TrainResult& result, double macs_per_item) {
  RunSummary s;
  s.task = task;
  s.attention = config.attention.type;
  for (const auto& [key, value] : config.attention.options)
    s.options += (s.options.empty() ? "" : ",") + key + "=" + value;
  s.seed = options.seed;
  s.eval = result.eval;
  s.parameters = model.num_parameters();
  s.macs_per_item = macs_per_item;
  s.active_heads = active_head_fraction(model);
  s.items_per_second = result.items_per_second;
  s.ranks = result.ranks;
  s.communication_share = result.seconds > 0 ? result.communication_seconds / result.seconds : 0;
  s.peak_bytes = result.peak_bytes;
  s.seconds = result.seconds;
  s.steps = result.last_step;
  s.interrupted = result.interrupted;
  s.eval_only = options.eval_only;
  return s;
}

int training_main(Flags& flags, TrainOptions& options, int argc, char** argv, const std::function<RunSummary()>& run,
                  const std::function<void()>& settle) {
  std::shared_ptr<Communicator> world;  // held to the end: MPI finalises when the last handle goes
  const int status = run_main(flags, [&] {
    if (!flags.parse(argc, argv)) return 0;
    check_flags_apply(flags);
    world = options.communicator = launch_communicator(options);
    try {
      // Held to the end, from before the checkpoint is read: a second process is refused at once.
      const std::shared_ptr<void> folder = writes_run_files(options) ? hold_run_folder(options.ckpt_dir) : nullptr;
      const int64_t saved_step = settle_resumed_settings(flags, flags, options);
      settle_train_options(flags, options);
      if (settle) settle();
      if (resumed_run_is_finished(flags, options, saved_step)) return 0;
      check_run_directory(options);
      options.settings = &flags;
      if (options.threads > 0) set_num_threads(options.threads);
      options.config_flags = &flags;  // the run prints the config table once it has estimated its memory
      RunSummary summary = run();
      std::printf("%s", describe(summary).c_str());
      return summary.interrupted ? 130 : 0;
    } catch (const UsageError&) {
      throw;  // the same on every rank
    } catch (const Error& error) {
      if (!world || world->size() == 1) throw;
      throw Error("rank " + std::to_string(world->rank()) + " of " + std::to_string(world->size()) + ": " +
                  error.what());
    }
  });
  end_job_on_failure(world, status);
  return status;
}

std::string model_summary(const RunSummary& s, const std::string& layers) {
  const char* item = s.task == "vit" ? "image" : "token";
  std::ostringstream out;
  out << "model: " << s.attention << (s.options.empty() ? "" : " " + s.options) << " | parameters "
      << format_count(s.parameters) << " | MACs/" << item << " " << format_si(s.macs_per_item) << " | active heads "
      << format_metric("accuracy", s.active_heads) << "\n"
      << layers;
  return out.str();
}

std::string describe(const RunSummary& s) {
  std::ostringstream out;
  if (s.eval.empty()) {
    out << "stopped at step " << format_count(s.steps) << ", before the first evaluation\n";
    return out.str();
  }
  out << "final (" << s.task << ", " << s.attention << (s.options.empty() ? "" : " " + s.options) << ", step "
      << format_count(s.steps) << "):";
  for (const auto& [name, value] : s.eval) out << " " << name << " " << format_metric(name, value);
  out << "\n" << (s.eval_only ? "evaluation " : "training ") << format_seconds(s.seconds);
  if (!s.eval_only) out << " | " << format_si(s.items_per_second) << (s.task == "vit" ? " img/s" : " tok/s");
  if (!s.eval_only && s.ranks > 1)
    out << " on " << s.ranks << " ranks (" << format_metric("accuracy", s.communication_share) << " communicating)";
  out << " | peak memory " << format_mib(s.peak_bytes) << "\n";
  return out.str();
}

}  // namespace headroom::examples
