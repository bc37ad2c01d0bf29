// The controls and counters of the stand-in NCCL (fake_nccl.cpp), found by
// the test with dlsym("fake_nccl") once ucx::nccl loaded it.
#pragma once

extern "C" {

struct fake_nccl_control {
    // Behaviour (set by the test).
    int id_result = 0;      ///< ncclGetUniqueId's result
    int init_polls = 2;     ///< polls until the initialization ends; -1: never
    int init_result = 0;    ///< how it ends
    int finalize_polls = 1; ///< polls until a finalization ends
    // Counters (read by the test).
    int ids = 0;
    int inits = 0;
    int polls = 0;
    int finalizes = 0;
    int aborts = 0;
    int destroys = 0;
    int last_blocking = -100; ///< config->blocking of the last initialization
    char last_id[16] = {};    ///< the first bytes of the last id used
};

fake_nccl_control* fake_nccl();
}
