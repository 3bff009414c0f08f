// Log sequence numbers: each batch appended to the write-ahead log gets the next one.
// LSNs start at 1 and have no holes within a log (WriteAheadLog.W1; FORMAT.md, "Write-ahead log").

/// The sequence number of one batch in the write-ahead log. `LSN.none` (0) precedes every batch.
public struct LSN: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    public init(_ rawValue: UInt64) { self.rawValue = rawValue }

    /// The LSN before the first batch.
    public static let none = LSN(0)

    /// The LSN that follows this one.
    public var next: LSN { LSN(rawValue + 1) }

    public static func < (lhs: LSN, rhs: LSN) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { "LSN \(rawValue)" }
}
