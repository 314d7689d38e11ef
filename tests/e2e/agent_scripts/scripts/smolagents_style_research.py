# A smolagents-style step: search the web, read pages, print observations, give a final answer.
results = unwrap(web_search(query="orders API HTTP 500 incident"))
print(f"Found {len(results)} results")
notes = []
for r in results[:2]:
    page = unwrap(visit_webpage(url=r["url"]))
    first_line, _, text = page.partition("\n\n")
    print(first_line)
    if "500" in text:
        notes.append(text.split(". ")[0])
answer = notes[0] if notes else "No incident found."
final = unwrap(final_answer(answer=answer))
final["answer"]
