"""One class per kind of named node (see `base.Kind`); a new view is a new class listed here."""

from .base import Kind
from .groups import Group, GroupQueue, Groups, GroupTopic
from .queue import Append, Follow, Jsonl, Lines, Queue, Tmp
from .root import Root, Status, Topic, Topics
from .search import At, KeyDir, Keys, TagDir, Tags

KINDS: tuple[type[Kind], ...] = (Root, Status, Topics, Topic, Queue, Append, Jsonl, Lines, Follow, Tmp,
                                 At, Tags, TagDir, Keys, KeyDir, Groups, Group, GroupTopic,
                                 GroupQueue)
