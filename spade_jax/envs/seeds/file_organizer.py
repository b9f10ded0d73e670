"""Tool use (file system): find the file that mentions an invoice and move it to the archive."""

from spade_jax.envs.base import ToolEnv, ToolError, tool

DIRS = ("/home/user/docs", "/home/user/downloads", "/home/user/notes")
WORDS = ("meeting", "budget", "draft", "summary", "receipt", "plan", "todo", "letter")
LINES = (
    "Remember to call the plumber on Monday.",
    "Quarterly budget draft, numbers still rough.",
    "Shopping: eggs, milk, coffee.",
    "Receipt for invoice #{n} is attached below.",
    "Notes from the team meeting about the launch.",
    "Payment reminder for invoice #{n}, due next week.",
)


class FileOrganizer(ToolEnv):
    KIND = "tool"
    SKILL = "file system"
    NAME = "file_organizer"
    FILES = 9

    def setup(self) -> str:
        self.files: dict[str, str] = {}
        numbers = self.rng.sample(range(1000, 9999), self.FILES)
        names = self.rng.sample([f"{w}_{i}.txt" for w in WORDS for i in range(1, 4)], self.FILES)
        for k, name in enumerate(names):
            line = self.rng.choice(LINES).format(n=numbers[k])
            self.files[f"{self.rng.choice(DIRS)}/{name}"] = line
        with_invoice = [p for p, text in self.files.items() if "invoice" in text]
        self.target = self.rng.choice(with_invoice or sorted(self.files))
        self.files[self.target] = f"Invoice #{self.rng.randint(10000, 99999)} - please archive after payment."
        self.invoice = self.files[self.target].split()[1]
        self.original = dict(self.files)
        return (
            f"Find the file under /home/user that contains invoice {self.invoice} and move it into /archive "
            "(keep its name). Do not change any other file. Then answer with the file's ORIGINAL full path."
        )

    @tool("List the entries of a directory; sub-directories end with '/'.", path="absolute directory path")
    def list_dir(self, path: str) -> list:
        path = path.rstrip("/") or "/"
        prefix = "" if path == "/" else path
        entries = set()
        for p in self.files:
            if p.startswith(prefix + "/"):
                rest = p[len(prefix) + 1 :]
                entries.add(rest.split("/")[0] + ("/" if "/" in rest else ""))
        if not entries and path not in ("/", "/archive"):
            raise ToolError(f"no such directory: {path}")
        return sorted(entries)

    @tool("Read a text file.", path="absolute file path")
    def read_file(self, path: str) -> str:
        if path not in self.files:
            raise ToolError(f"no such file: {path}")
        return self.files[path]

    @tool("Move a file into a directory.", src="file to move", dst_dir="destination directory")
    def move_file(self, src: str, dst_dir: str) -> str:
        if src not in self.files:
            raise ToolError(f"no such file: {src}")
        dst = dst_dir.rstrip("/") + "/" + src.rsplit("/", 1)[1]
        if dst in self.files:
            raise ToolError(f"already exists: {dst}")
        self.files[dst] = self.files.pop(src)
        return f"moved to {dst}"

    @tool("Delete a file permanently.", path="absolute file path")
    def delete_file(self, path: str) -> str:
        if path not in self.files:
            raise ToolError(f"no such file: {path}")
        del self.files[path]
        return "deleted"

    def archived_path(self) -> str:
        return "/archive/" + self.target.rsplit("/", 1)[1]

    def check_answer(self, answer: str) -> bool:
        expected = {p: t for p, t in self.original.items() if p != self.target}
        expected[self.archived_path()] = self.original[self.target]
        return self.files == expected and answer.strip() == self.target

    def hint(self) -> str:
        folder = self.target.rsplit("/", 1)[0]
        return f"List the three folders under /home/user and read the files; the invoice file is in {folder}."

    def reference_action(self) -> str:
        if self.target in self.files:
            return self.call("move_file", src=self.target, dst_dir="/archive")
        return self.answer(self.target)
