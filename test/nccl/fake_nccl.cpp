// A stand-in for libnccl.so.2 in tests that need no GPU: the functions
// ucx::nccl loads, with NCCL's signatures (from nccl.h), whose non-blocking
// initialization and finalization take a number of polls that the test sets,
// fail with a result it chooses, or never end; it counts the calls, so that
// the test sees that a communicator was aborted or destroyed. The real NCCL
// is tested by nccl_test.cpp on a GPU.
#include "fake_nccl.hpp"

#include <nccl.h>

#include <cstring>

struct ncclComm {
    int rank = 0;
    int size = 0;
    int polls_left = 0;     // -1: never done
    ncclResult_t outcome{}; // once polls_left reaches 0
};

namespace {
fake_nccl_control control;
}

extern "C" {

fake_nccl_control* fake_nccl() {
    return &control;
}

ncclResult_t ncclGetVersion(int* version) {
    *version = 22809;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    ++control.ids;
    if (control.id_result != 0)
        return static_cast<ncclResult_t>(control.id_result);
    std::memset(id, 0, sizeof *id);
    std::memcpy(id->internal, "fake-id", 7);
    id->internal[8] = static_cast<char>(control.ids);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
    ++control.inits;
    control.last_blocking = config->blocking;
    std::memcpy(control.last_id, id.internal, sizeof control.last_id);
    auto* c = new ncclComm;
    c->rank = rank;
    c->size = nranks;
    c->polls_left = control.init_polls;
    c->outcome = static_cast<ncclResult_t>(control.init_result);
    *comm = c;
    if (c->polls_left == 0)
        return c->outcome;
    return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
    ++control.polls;
    if (comm->polls_left > 0)
        --comm->polls_left;
    *state = comm->polls_left == 0 ? comm->outcome : ncclInProgress;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    ++control.finalizes;
    comm->polls_left = control.finalize_polls;
    comm->outcome = ncclSuccess;
    return comm->polls_left == 0 ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    ++control.aborts;
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    ++control.destroys;
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    *count = comm->size;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    *rank = comm->rank;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclInvalidUsage:
        return "invalid usage (fake)";
    case ncclSystemError:
        return "unhandled system error (fake)";
    default:
        return "fake NCCL error";
    }
}

} // extern "C"
