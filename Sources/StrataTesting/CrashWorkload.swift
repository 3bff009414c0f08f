// What the crash harness runs: a workload is a deterministic sequence of steps, each
// typically one unit of work, plus an invariant of its own that must hold after any crash.
// The harness checks the store-wide promises (I1–I4 of docs/Durability.md) itself.
@_exported import Strata
import Foundation
// The simulated file system (crashes, torn writes, injected errors) and the seeded
// generator that workloads draw from: the two things a user's own workload touches.
@_exported import class StrataFileIO.SimulatedFileSystem
@_exported import struct StrataFileIO.SplitMix64
import StrataFileIO

/// A workload for the crash harness. Steps must be deterministic for a given random
/// generator state: the harness runs the same seed once without faults to learn every
/// state the store may legally be in, then again under each fault.
public protocol CrashWorkload: Sendable {
    /// A short name for reports and replay commands.
    var name: String { get }
    /// How many steps a full run has.
    var stepCount: Int { get }
    /// The harness checkpoints after every this many steps (0: never), so crashes also
    /// land inside checkpoints.
    var checkpointInterval: Int { get }
    /// Whether a seed always yields the same commits in the same order. When false (steps
    /// that commit from several threads at once), the harness cannot know which prefix
    /// states are legal and checks I1, I3, I4 and the invariant only.
    var isDeterministic: Bool { get }
    /// Prepares a fresh store (one or more units of work); called once, before step 0.
    func setUp(_ store: Store) throws
    /// Runs step `index`, drawing any randomness from `random`. Throwing ends the run
    /// (the harness expects throws once a fault hits).
    func run(step index: Int, on store: Store, random: inout SplitMix64) throws
    /// Checks the workload's own invariant on a recovered store; throws
    /// `WorkloadViolation` (or any error) saying what is wrong.
    func checkInvariant(_ store: Store) throws
}

extension CrashWorkload {
    public var checkpointInterval: Int { 20 }
    public var isDeterministic: Bool { true }
    public func setUp(_ store: Store) throws {}
    public func checkInvariant(_ store: Store) throws {}
}

/// A broken workload invariant.
public struct WorkloadViolation: Error, CustomStringConvertible, LocalizedError {
    public let description: String

    public init(_ description: String) { self.description = description }

    public var errorDescription: String? { description }
}
