// `verify()`: walks every reachable page and checks what the format promises — checksums,
// key order within and across pages, branch bounds, uniform leaf depth, overflow chains,
// no entry newer than the meta page's checkpoint version, and that every page of the file is either a meta page, reachable, on the free list, or
// holds the free list, exactly once. Returns a report; never traps on bad bytes.

/// What `verify()` found.
public struct VerifyReport: Sendable, CustomStringConvertible {
    /// The meta page used, and what the other one holds (its generation, or why it is invalid).
    public var metaGeneration: UInt64 = 0
    public var otherMeta = ""
    public var pageCount: UInt64 = 0
    public var treeHeight = 0
    public var leafPages = 0
    /// Leaves among `leafPages` stored LZ4-compressed (`EngineOptions.leafCompression`).
    public var compressedLeafPages = 0
    public var branchPages = 0
    public var overflowPages = 0
    public var freePages = 0
    public var freeListPages = 0
    /// Live keys and tombstones in the tree (the memtable is not counted).
    public var keys = 0
    public var tombstones = 0
    /// Everything wrong, one sentence each with the page's offset. Empty when the file is sound.
    public var problems: [String] = []

    public var isValid: Bool { problems.isEmpty }

    public var description: String {
        var lines = ["meta generation \(metaGeneration) (other meta: \(otherMeta)), \(pageCount) pages, height \(treeHeight)",
                     "\(leafPages) leaf\(compressedLeafPages > 0 ? " (\(compressedLeafPages) compressed)" : ""), \(branchPages) branch, \(overflowPages) overflow, \(freePages) free, "
                         + "\(freeListPages) free-list pages; \(keys) keys, \(tombstones) tombstones"]
        lines += problems.map { "problem: \($0)" }
        return lines.joined(separator: "\n")
    }
}

extension StorageEngine {
    /// Checks the durable data file (the last checkpoint's tree and free list). O(pages).
    /// `progress` is called with the pages checked so far and the file's page count.
    public func verify(progress: (_ checked: Int, _ pageCount: Int) -> Void = { _, _ in }) -> VerifyReport {
        withoutActuallyEscaping(progress) { progress in verify(reportingTo: progress) }
    }

    private func verify(reportingTo progress: @escaping (Int, Int) -> Void) -> VerifyReport {
        checkpointLock.withLock { durable in
            var report = VerifyReport()
            let meta = durable.meta
            report.metaGeneration = meta.generation
            report.pageCount = meta.pageCount
            report.treeHeight = Int(meta.height)
            do {
                let (_, rejected) = try Self.readMeta(pageFile.file, path: pageFile.path)
                report.otherMeta = rejected ?? "valid, generation \(meta.generation == 0 ? 0 : meta.generation - 1)"
            } catch {
                report.problems.append("the meta pages no longer read back: \(error)")
            }
            var walk = VerifyWalk(pageCount: meta.pageCount, report: report, progress: progress)
            walk.checkpointVersion = meta.checkpointVersion
            if meta.root != .none {
                self.walk(meta.root, level: 1, height: Int(meta.height), lower: nil, upper: nil, into: &walk)
            }
            do {
                let (free, listPages) = try Self.readFreeList(meta, pageFile: pageFile)
                for id in free { walk.claim(id, "a free page") }
                for id in listPages { walk.claim(id, "a free-list page") }
                walk.report.freePages = free.count
                walk.report.freeListPages = listPages.count
            } catch {
                walk.report.problems.append("the free list does not read: \(error)")
            }
            report = walk.report
            let owner = walk.owner
            progress(owner.count + 2, Int(meta.pageCount))
            let accounted = UInt64(owner.count) + 2
            if accounted != meta.pageCount {
                report.problems.append("\(meta.pageCount - min(meta.pageCount, accounted)) pages are neither reachable nor free")
            }
            if UInt64(report.keys) != meta.keyCount {
                report.problems.append("the meta page counts \(meta.keyCount) keys but the tree holds \(report.keys)")
            }
            return report
        }
    }

    /// Checks the subtree at `id`, whose keys must lie in [lower, upper).
    private func walk(_ id: PageID, level: Int, height: Int, lower: [UInt8]?, upper: [UInt8]?, into walk: inout VerifyWalk) {
        walk.claim(id, "a tree page")
        let node: Node
        let compressed: Bool
        do { (node, compressed) = try pageFile.nodeAndForm(id) } catch {
            walk.report.problems.append("\(error)")
            return
        }
        func inBounds(_ key: [UInt8]) -> Bool {
            (lower.map { compareKeys(key, $0) >= 0 } ?? true) && (upper.map { compareKeys(key, $0) < 0 } ?? true)
        }
        let offset = id.offset(pageBytes: pageFile.pageBytes)
        switch node {
        case let .leaf(entries):
            walk.report.leafPages += 1
            if compressed { walk.report.compressedLeafPages += 1 }
            if level != height { walk.report.problems.append("the leaf at offset \(offset) is at depth \(level), not \(height)") }
            if entries.isEmpty { walk.report.problems.append("the leaf at offset \(offset) is empty") }
            if let newest = entries.map(\.version).max(), newest > walk.checkpointVersion {
                walk.report.problems.append("the leaf at offset \(offset) holds a key of version \(newest), after its checkpoint's \(walk.checkpointVersion)")
            }
            for entry in entries {
                if !inBounds(entry.key) { walk.report.problems.append("a key in the leaf at offset \(offset) is outside its branch's range") }
                switch entry.payload {
                case .tombstone: walk.report.tombstones += 1
                case .inline: walk.report.keys += 1
                case let .overflow(value):
                    walk.report.keys += 1
                    do {
                        let pages = try pageFile.overflowPages(value)
                        for page in pages { walk.claim(page, "an overflow page") }
                        walk.report.overflowPages += pages.count
                        _ = try pageFile.withOverflowValue(value, fresh: true) { $0.count }
                    } catch {
                        walk.report.problems.append("the overflow pages of a value in the leaf at offset \(offset): \(error)")
                    }
                }
            }
        case let .branch(children):
            walk.report.branchPages += 1
            if level >= height { walk.report.problems.append("the branch at offset \(offset) is at depth \(level), at or below \(height)") ; return }
            for (index, child) in children.enumerated() {
                if index > 0 && !inBounds(child.key) {
                    walk.report.problems.append("a separator in the branch at offset \(offset) is outside its range")
                }
                let childLower = index == 0 ? lower : child.key
                let childUpper = index + 1 < children.count ? children[index + 1].key : upper
                self.walk(child.child, level: level + 1, height: height, lower: childLower, upper: childUpper, into: &walk)
            }
        }
    }
}

/// The state of a verification walk: the report, and which role claimed each page.
struct VerifyWalk {
    let pageCount: UInt64
    /// The meta page's `checkpointVersion`: no entry of its tree may be newer (commits
    /// check conflicts against the tree only for readers older than it).
    var checkpointVersion: UInt64 = .max
    var report: VerifyReport
    /// Told the pages claimed so far, every 4,096 pages.
    let progress: (Int, Int) -> Void
    var owner: [PageID: String] = [:]

    mutating func claim(_ id: PageID, _ role: String) {
        if owner.count % 4096 == 4095 { progress(owner.count + 2, Int(pageCount)) }
        if id < .firstDataPage || id.rawValue >= pageCount {
            report.problems.append("\(role) \(id) is outside the file's \(pageCount) pages")
        } else if let other = owner[id] {
            report.problems.append("\(id) is used as \(role) and as \(other)")
        } else {
            owner[id] = role
        }
    }
}
