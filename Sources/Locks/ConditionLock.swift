// A mutex with one condition variable, for the group-commit hand-off between the leader
// that writes and syncs and the followers that wait for it. `Synchronization.Mutex` has
// no condition variable; this wraps pthread's, allocated once and never moved.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A pthread mutex and condition variable. The owner keeps its shared state in its own
/// properties and touches them only between `lock()` and `unlock()`.
package final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        condition.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }

    package func unlock() { pthread_mutex_unlock(mutex) }

    /// Releases the lock until the next broadcast, then takes it back. Spurious wake-ups
    /// happen, so callers wait in a loop on their condition.
    package func wait() { pthread_cond_wait(condition, mutex) }

    /// Wakes every waiting thread.
    package func broadcast() { pthread_cond_broadcast(condition) }
}
