// The version of ucx-asio: the one place it is written (CMakeLists.txt reads
// it from here). Versioning policy: docs/development/versioning.md.
#pragma once

/// The major version: 0 until the interface is declared stable.
#define UCX_ASIO_VERSION_MAJOR 0
/// The minor version: a release that adds, changes or removes what users see.
#define UCX_ASIO_VERSION_MINOR 1
/// The patch version: a release of fixes only.
#define UCX_ASIO_VERSION_PATCH 0
/// One number for comparisons: major * 10000 + minor * 100 + patch
/// (`#if UCX_ASIO_VERSION >= 200` for 0.2.0 and later).
#define UCX_ASIO_VERSION                                                                           \
    (UCX_ASIO_VERSION_MAJOR * 10000 + UCX_ASIO_VERSION_MINOR * 100 + UCX_ASIO_VERSION_PATCH)

namespace ucx {

/// The version of the ucx-asio library this program is linked with, as
/// `UCX_ASIO_VERSION` was when the library was built: a program whose
/// headers say otherwise was compiled against another release.
int library_version() noexcept;

} // namespace ucx
