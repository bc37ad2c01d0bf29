// ucx-asio: UCX communication as Boost.Asio asynchronous operations.
#pragma once

#include <ucx/acceptor.hpp>
#include <ucx/am.hpp>
#include <ucx/am_allocator.hpp>
#include <ucx/am_message.hpp>
#include <ucx/configuration.hpp>
#include <ucx/connect.hpp>
#include <ucx/context.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/error.hpp>
#include <ucx/group.hpp>
#include <ucx/launch.hpp>
#include <ucx/listener.hpp>
#include <ucx/log.hpp>
#include <ucx/memory_region.hpp>
#include <ucx/memory_type.hpp>
#include <ucx/progress_mode.hpp>
#include <ucx/remote_key.hpp>
#include <ucx/rma.hpp>
#include <ucx/store.hpp>
#include <ucx/stream.hpp>
#include <ucx/tag.hpp>
#include <ucx/tag_type.hpp>
#include <ucx/ucxio.hpp>
#include <ucx/worker.hpp>
#include <ucx/worker_address.hpp>
