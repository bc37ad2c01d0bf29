// The entry point of every GoogleTest executable of the suite. It runs the
// tests GoogleTest's flags select, and exits with status 77 (ctest's
// SKIP_RETURN_CODE) when each selected test was skipped and none failed:
// ctest reports such a run as skipped, not passed, while a run in which some
// tests pass and others are skipped passes, with each skip's reason in its
// output.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    const int status = RUN_ALL_TESTS();
    const auto* run = ::testing::UnitTest::GetInstance();
    if (status == 0 && run->successful_test_count() == 0 && run->skipped_test_count() > 0)
        return 77;
    return status;
}
