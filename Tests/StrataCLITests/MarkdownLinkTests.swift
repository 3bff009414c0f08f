// Every relative link in every Markdown file of the repository points at a file or folder
// that exists (a reader of the package, or of a clone, can open it). Links to the web
// (`http:`, `https:`, `mailto:`) and in-page anchors are not checked here.
import Foundation
import Testing

@Suite struct MarkdownLinkTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The Markdown files of the repository, outside build and scratch folders.
    static func markdownFiles() -> [URL] {
        let skipped: Set<String> = [".build", ".git", "corpus-work", "crashes"]
        guard let walker = FileManager.default.enumerator(at: root, includingPropertiesForKeys: [.isDirectoryKey]) else {
            return []
        }
        var files: [URL] = []
        for case let url as URL in walker {
            let name = url.lastPathComponent
            if skipped.contains(name) || name.hasPrefix(".build") {
                walker.skipDescendants()
            } else if url.pathExtension == "md" {
                files.append(url)
            }
        }
        return files.sorted { $0.path < $1.path }
    }

    /// The targets of `[text](target)` and `![alt](target)` links in `text`, outside code.
    static func linkTargets(in text: String) -> [String] {
        var targets: [String] = []
        var inFence = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") {
                inFence.toggle()
                continue
            }
            guard !inFence else { continue }
            // Inline code spans are not links.
            let outsideCode = line.split(separator: "`", omittingEmptySubsequences: false).enumerated()
                .filter { $0.offset % 2 == 0 }.map(\.element).joined(separator: " ")
            var rest = Substring(outsideCode)
            while let close = rest.range(of: "](") {
                let after = rest[close.upperBound...]
                guard let end = after.firstIndex(of: ")") else { break }
                let target = after[..<end].split(separator: " ").first.map(String.init) ?? ""
                targets.append(target)
                rest = after[end...]
            }
        }
        return targets
    }

    @Test func theCheckerFindsLinksAndSkipsCode() {
        let sample = "See [the format](FORMAT.md#pages) and ![chart](img/a.svg).\n`[not](a link)`\n```\n[no](x.md)\n```\n"
        #expect(Self.linkTargets(in: sample) == ["FORMAT.md#pages", "img/a.svg"])
    }

    @Test func everyRelativeLinkResolves() throws {
        let files = Self.markdownFiles()
        #expect(files.contains { $0.lastPathComponent == "README.md" })
        var checked = 0
        var broken: [String] = []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for target in Self.linkTargets(in: text) {
                if target.isEmpty || target.hasPrefix("#") || target.contains("://") || target.hasPrefix("mailto:") {
                    continue
                }
                let path = String(target.split(separator: "#", maxSplits: 1).first ?? "")
                let resolved = file.deletingLastPathComponent().appendingPathComponent(path).standardizedFileURL
                checked += 1
                if !FileManager.default.fileExists(atPath: resolved.path) {
                    broken.append("\(file.path.dropFirst(Self.root.path.count + 1)): \(target)")
                }
            }
        }
        print("checked \(checked) relative link(s) in \(files.count) Markdown file(s)")
        #expect(broken.isEmpty, "broken links: \(broken.joined(separator: ", "))")
    }
}
