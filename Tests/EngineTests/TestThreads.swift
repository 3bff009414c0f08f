import Foundation

/// Threads started at once, each running `body` with its index (0..<count); `wait()`
/// returns when every one has finished. For the tests that race threads against each
/// other or against the test's own thread.
struct TestThreads {
    private let group = DispatchGroup()

    init(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        for index in 0..<count {
            group.enter()
            Thread.detachNewThread { [group] in
                defer { group.leave() }
                body(index)
            }
        }
    }

    func wait() { group.wait() }
}
