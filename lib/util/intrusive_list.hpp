// Internal: a doubly linked list threaded through two pointer members of its
// nodes, headed by a plain pointer (null when empty).
#pragma once

namespace ucx::detail {

/// The list of `T`s linked through `T::*Prev` and `T::*Next`.
template <class T, T* T::*Prev, T* T::*Next>
struct intrusive_list {
    /// Puts `n` first in the list headed by `head`.
    static void push_front(T*& head, T* n) noexcept {
        n->*Prev = nullptr;
        n->*Next = head;
        if (head)
            head->*Prev = n;
        head = n;
    }

    /// Takes `n` out of the list headed by `head` and clears its links.
    static void erase(T*& head, T* n) noexcept {
        if (n->*Prev)
            n->*Prev->*Next = n->*Next;
        else if (head == n)
            head = n->*Next;
        if (n->*Next)
            n->*Next->*Prev = n->*Prev;
        n->*Prev = n->*Next = nullptr;
    }
};

} // namespace ucx::detail
