// A value behind a pthread mutex.
//
// Why not `Synchronization.Mutex`: on Linux its slow path spins before it sleeps, and with
// more threads than cores (eight committers on two cores) the spinning threads take the
// CPU from the thread holding the lock; measured, 55 % of all cycles of a concurrent
// commit benchmark went to that spin. A pthread mutex parks waiters in the kernel at once;
// `Locked(_:adaptive: true)` (glibc's PTHREAD_MUTEX_ADAPTIVE_NP) first spins a bounded
// few times, for a lock held only for a few loads and stores and taken by every read.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value of type `Value` that is read and changed only while its mutex is held.
/// `@unchecked Sendable`: `value` is touched only inside `withLock`, under `mutex`.
package final class Locked<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    // Unchecked: the mutex makes every access exclusive (and `withLock`'s body must not
    // call back in); the run-time check cost two calls into the runtime a lock taken,
    // about 1,100 instructions of a one-key durable commit's 35,000 (callgrind).
    @exclusivity(unchecked) private var value: Value

    /// `adaptive`: a waiter spins briefly (glibc's bounded adaptive spin) before it sleeps
    /// in the kernel: for a lock held only for a few instructions. Elsewhere (Darwin,
    /// Musl) the mutex is the default one.
    package init(_ value: Value, adaptive: Bool = false) {
        self.value = value
        #if canImport(Glibc)
        if adaptive {
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
            pthread_mutex_init(mutex, &attributes)
            pthread_mutexattr_destroy(&attributes)
            return
        }
        #endif
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the mutex held. `body` must not call back into this lock.
    @inlinable
    package func withLock<T, E: Error>(_ body: (inout Value) throws(E) -> T) throws(E) -> T {
        lock()
        defer { unlock() }
        return try body(&storage)
    }

    @usableFromInline
    var storage: Value {
        _read { yield value }
        _modify { yield &value }
    }

    @usableFromInline
    func lock() { pthread_mutex_lock(mutex) }

    @usableFromInline
    func unlock() { pthread_mutex_unlock(mutex) }
}
