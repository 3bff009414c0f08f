// A mutex with one condition variable, for the group-commit hand-off between the leader
// that writes and syncs and the followers that wait for it, and sleepers: condition
// variables a waiting thread has to itself, so that one thread is woken, not all.
// `Synchronization.Mutex` has no condition variable; this wraps pthread's, allocated once
// and never moved.
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

    /// Releases the lock until `sleeper` is woken (or wakes spuriously), then takes it back.
    package func wait(_ sleeper: Sleeper) { pthread_cond_wait(sleeper.condition, mutex) }
}

/// A condition variable of one waiting thread's own, so that whoever knows that thread may
/// go on wakes it alone (LevelDB's writers wait the same way), with or without the lock
/// held: a sleeper lives as long as anyone holds it, so a thread that decided under the
/// lock to wake it may do so after releasing the lock, and the woken thread does not
/// block at once on the lock its waker still holds.
package final class Sleeper: @unchecked Sendable {
    fileprivate let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() { pthread_cond_init(condition, nil) }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
    }

    /// Wakes the thread waiting on this sleeper, if one waits.
    package func wake() { pthread_cond_signal(condition) }
}
