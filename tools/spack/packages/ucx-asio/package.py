# ucx-asio's Spack package (docs/development/building.md#spack).

from spack.package import *


class UcxAsio(CMakePackage, CudaPackage):
    """UCX as a first-class citizen of Boost.Asio: workers, endpoints, tag
    and active messages, RMA, streams, groups and collectives over UCX,
    completing as Asio handlers with any completion token; GPU buffers in the
    same calls."""

    homepage = "https://github.com/ucx-asio/ucx-asio"
    git = "https://github.com/ucx-asio/ucx-asio.git"

    version("main", branch="main")

    variant("nccl", default=False, description="NCCL communicators over a group (ucx::asio_nccl)")
    variant(
        "pmix",
        default=True,
        description="ucx::pmix_store: the key-value space of a PMIx launcher (mpirun)",
    )
    variant("tools", default=True, description="ucx-asio-info and ucxcat")
    variant("tests", default=False, description="Build the test suite (GoogleTest)")

    conflicts("+nccl", when="~cuda", msg="NCCL communicators need CUDA")

    depends_on("cmake@3.25:", type="build")
    # The CMake package and ucx-asio.pc find UCX through pkg-config.
    depends_on("pkgconfig", type=("build", "link"))
    # Cross-memory attach: large messages between processes of one node; the
    # worker-sharing mode of UCP (workers of one context on several threads).
    depends_on("ucx@1.13: +cma +thread_multiple")
    depends_on("boost@1.81: +log +system +thread")
    depends_on("yaml-cpp@0.6:")
    depends_on("pmix", when="+pmix")
    depends_on("nccl", when="+nccl")
    depends_on("googletest", type="build", when="+tests")

    def cmake_args(self):
        args = [
            self.define_from_variant("UCX_ASIO_WITH_CUDA", "cuda"),
            self.define_from_variant("UCX_ASIO_WITH_NCCL", "nccl"),
            self.define_from_variant("UCX_ASIO_WITH_PMIX", "pmix"),
            self.define_from_variant("UCX_ASIO_BUILD_TOOLS", "tools"),
            self.define_from_variant("UCX_ASIO_BUILD_TESTS", "tests"),
            self.define("UCX_ASIO_BUILD_SAMPLES", False),
        ]
        if self.spec.satisfies("+nccl"):
            args.append(self.define("NCCL_ROOT", self.spec["nccl"].prefix))
        return args

    @run_after("install")
    def install_tools(self):
        # The tools' build has no install rule: the two a user runs.
        if self.spec.satisfies("+tools"):
            mkdirp(self.prefix.bin)
            for tool in ("ucx-asio-info", "ucxcat"):
                install(join_path(self.build_directory, "tools", tool), self.prefix.bin)
