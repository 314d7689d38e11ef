# Answer a support question from the knowledge base, citing the documents used.
import re
from collections import Counter

question = "What does error E1042 mean and how do I fix SSO?"
codes = re.findall(r"E\d{4}", question)
hits = unwrap(search_docs(query="SSO error " + " ".join(codes), limit=3))
sentences, cited = [], []
for hit in hits:
    doc = unwrap(get_doc(doc_id=hit["doc_id"]))
    for sentence in re.split(r"(?<=[.;])\s+", doc["body"]):
        if any(code in sentence for code in codes) or "SSO" in sentence:
            sentences.append(sentence.strip())
            if doc["doc_id"] not in cited:
                cited.append(doc["doc_id"])
words = Counter(w.lower() for s in sentences for w in re.findall(r"[A-Za-z]+", s) if len(w) > 3)
print("\n".join(f"- {s}" for s in sentences))
{"answer": " ".join(sentences), "cited": cited, "keywords": [w for w, _ in words.most_common(3)]}
