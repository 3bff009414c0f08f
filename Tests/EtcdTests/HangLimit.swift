import Testing

extension Trait where Self == TimeLimitTrait {
    /// The time limit of the suites that talk to etcd: long enough for the whole test
    /// suite, short of CI's budget, so that it names a test that hangs and never one that
    /// waited its turn. Inside the whole suite on two cores, an async test's continuations
    /// wait for cooperative threads that synchronous tests hold: the tests of these
    /// suites finished 896–962 s after they started in three full runs, though each takes
    /// seconds alone, and a limit of two minutes failed them whenever its own timer got a
    /// thread first.
    static var hangLimit: Self { .timeLimit(.minutes(30)) }
}
