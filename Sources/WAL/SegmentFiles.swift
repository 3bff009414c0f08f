// Segment files in the log's directory: their names, and the create / recycle / release
// steps, each followed by a directory fsync (FORMAT.md, "Segment files").
//
// Names:  wal-<sequence, 16 hex digits>.seg   a segment of the log
//         wal-<sequence>.seg.tmp              a segment being created (removed at open)
//         wal-spare-<old sequence>.seg        a released segment kept for reuse
// A segment gets its name only after its header is written and synced (SegmentHeader.swift).
import StrataFileIO

struct SegmentFiles {
    let fileSystem: any FileSystem
    let directory: String
    /// Segments with a smaller sequence number are left out of `list()` (a read of history
    /// that starts at a later segment).
    var firstSequence: UInt64 = 0

    /// The directory inside a log's directory where released segments are kept as history
    /// (FORMAT.md, "History").
    static let historyDirectoryName = "history"

    static let prefix = "wal-"
    static let sparePrefix = "wal-spare-"
    static let suffix = ".seg"

    func path(ofSegment sequence: UInt64) -> String {
        joinPath(directory, Self.prefix + hex16(sequence) + Self.suffix)
    }

    /// The sequence number a segment file name carries, or nil for any other name.
    static func sequence(fromName name: String) -> UInt64? {
        guard name.hasPrefix(prefix), !name.hasPrefix(sparePrefix), name.hasSuffix(suffix) else { return nil }
        let digits = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard digits.count == 16 else { return nil }
        return UInt64(digits, radix: 16)
    }

    /// The directory's segments (sorted by sequence), spares, and leftover temporary files.
    func list() throws -> (segments: [(sequence: UInt64, path: String)], spares: [String], temporaries: [String]) {
        var segments: [(UInt64, String)] = []
        var spares: [String] = []
        var temporaries: [String] = []
        for name in try fileSystem.contentsOfDirectory(directory) {
            if let sequence = Self.sequence(fromName: name) {
                if sequence >= firstSequence { segments.append((sequence, joinPath(directory, name))) }
            } else if name.hasPrefix(Self.sparePrefix) && name.hasSuffix(Self.suffix) {
                spares.append(joinPath(directory, name))
            } else if name.hasPrefix(Self.prefix) && name.hasSuffix(Self.suffix + ".tmp") {
                temporaries.append(joinPath(directory, name))
            }
        }
        return (segments.sorted { $0.0 < $1.0 }, spares, temporaries)
    }

    /// Makes the segment `header.sequence`: reuses `spare` when given (its old frames carry
    /// another salt and never verify), else creates and preallocates a new file. The header
    /// is written and synced before the file gets its segment name; the directory is synced
    /// after. Returns the open handle.
    func create(_ header: SegmentHeader, reusing spare: String?) throws -> any OpenFile {
        let temporary = path(ofSegment: header.sequence) + ".tmp"
        if let spare {
            try fileSystem.rename(spare, to: temporary)
        }
        let handle = try fileSystem.open(temporary, options: [.write, .create])
        do {
            if try handle.size() < Int64(header.capacityBytes) {
                try handle.allocate(offset: 0, length: Int64(header.capacityBytes))
            }
            try handle.write(header.encoded(), at: 0)
            try handle.sync()
            try fileSystem.rename(temporary, to: path(ofSegment: header.sequence))
            try fileSystem.syncDirectory(directory)
        } catch {
            try? handle.close()
            throw error
        }
        return handle
    }

    /// Releases a segment that recovery no longer needs: renamed to a spare when fewer than
    /// `maxSpares` exist, else removed; then the directory is synced.
    func release(_ sequence: UInt64, spareCount: Int, maxSpares: Int) throws -> String? {
        let source = path(ofSegment: sequence)
        var spare: String?
        if spareCount < maxSpares {
            let destination = joinPath(directory, Self.sparePrefix + hex16(sequence) + Self.suffix)
            try fileSystem.rename(source, to: destination)
            spare = destination
        } else {
            try fileSystem.removeFile(source)
        }
        try fileSystem.syncDirectory(directory)
        return spare
    }
}

extension SegmentFiles {
    /// The history kept beside this log (`SegmentFiles.historyDirectoryName`).
    var history: SegmentFiles { SegmentFiles(fileSystem: fileSystem, directory: joinPath(directory, Self.historyDirectoryName)) }

    /// Moves segment `sequence` of this log into `history` under the same name, and syncs
    /// both directories. A crash before the syncs leaves it where it was, or in both, or
    /// (its batches being in the data file already) in neither: never in a half state.
    func moveToHistory(_ sequence: UInt64) throws {
        let history = self.history
        if !fileSystem.fileExists(history.directory) { try fileSystem.createDirectoryDurably(history.directory) }
        try fileSystem.rename(path(ofSegment: sequence), to: history.path(ofSegment: sequence))
        try fileSystem.syncDirectory(history.directory)
        try fileSystem.syncDirectory(directory)
    }

    /// The first LSN in the header of the segment at `path`.
    func firstLSN(ofSegment path: String) throws -> LSN {
        do {
            let handle = try fileSystem.open(path, options: [])
            defer { try? handle.close() }
            return try SegmentHeader.decode(handle.read(count: WALFormat.segmentHeaderBytes, at: 0), path: path).firstLSN
        } catch let error as FileIOError {
            throw WALError.io(error)
        }
    }

    /// The segments of a history directory with their first LSNs and sizes, oldest first
    /// (none when it does not exist). Throws `WALError` naming a segment whose header does
    /// not read.
    func historySegments() throws -> [(sequence: UInt64, path: String, firstLSN: LSN, bytes: Int)] {
        guard fileSystem.fileExists(directory) else { return [] }
        let listing: [(sequence: UInt64, path: String)]
        do { listing = try list().segments } catch let error as FileIOError { throw WALError.io(error) }
        return try listing.map(historySegment(_:))
    }

    /// One history segment's first LSN and size (`historySegments()`).
    func historySegment(_ segment: (sequence: UInt64, path: String)) throws
        -> (sequence: UInt64, path: String, firstLSN: LSN, bytes: Int) {
        let bytes: Int
        do {
            let handle = try fileSystem.open(segment.path, options: [])
            defer { try? handle.close() }
            bytes = Int(try handle.size())
        } catch let error as FileIOError {
            throw WALError.io(error)
        }
        return (segment.sequence, segment.path, try firstLSN(ofSegment: segment.path), bytes)
    }

    /// Removes the oldest history segments until the rest hold batches among the latest
    /// `retention.versions` before `nextLSN` and take at most `retention.bytes`. A segment
    /// whose header does not read is removed, and every one before it: damaged history is
    /// of no use to a reader, and must not stop the checkpoints that prune it.
    func pruneHistory(_ retention: HistoryRetention, nextLSN: LSN) throws {
        let history = self.history
        var segments: [(sequence: UInt64, path: String, firstLSN: LSN, bytes: Int)]
        do {
            segments = try history.historySegments()
        } catch is WALError {
            let listing: [(sequence: UInt64, path: String)]
            do { listing = try history.list().segments } catch let error as FileIOError { throw WALError.io(error) }
            let readable = listing.map { try? history.historySegment($0) }
            let firstGood = (readable.lastIndex { $0 == nil }).map { $0 + 1 } ?? 0
            do {
                for segment in listing[..<firstGood] { try fileSystem.removeFile(segment.path) }
                try fileSystem.syncDirectory(history.directory)
            } catch let error as FileIOError {
                throw WALError.io(error)
            }
            segments = readable[firstGood...].compactMap { $0 }
        }
        var total = segments.reduce(0) { $0 + $1.bytes }
        let oldestKept = nextLSN.rawValue > retention.versions ? nextLSN.rawValue - retention.versions : 0
        var removed = false
        for (index, segment) in segments.enumerated() {
            // The segment after this one starts past the window's start: this one is needed.
            let nextFirst = index + 1 < segments.count ? segments[index + 1].firstLSN.rawValue : nextLSN.rawValue
            guard total > retention.bytes || nextFirst <= oldestKept else { break }
            do { try fileSystem.removeFile(segment.path) } catch let error as FileIOError { throw WALError.io(error) }
            total -= segment.bytes
            removed = true
        }
        if removed { try fileSystem.syncDirectory(history.directory) }
    }
}

func hex16(_ value: UInt64) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 16 - digits.count) + digits
}
