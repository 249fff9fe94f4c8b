// node tokenizer_crosscheck.mjs MODEL_DIR CASES_JSON NODE_MODULES
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";
const [model, casesPath, nm] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(path.join(nm, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const tj = JSON.parse(fs.readFileSync(path.join(model, "tokenizer.json"), "utf8"));
const tc = JSON.parse(fs.readFileSync(path.join(model, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tj, tc);
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
let bad = 0, ntok = 0, dbad = 0;
for (const c of cases) {
  const ids = tok.encode(c.text, { add_special_tokens: false }).ids.map(Number);
  ntok += ids.length;
  const same = ids.length === c.ids.length && ids.every((v, i) => v === c.ids[i]);
  if (!same) {
    if (bad < 5) console.log("MISMATCH", JSON.stringify(c.text).slice(0, 120), "\n  py", JSON.stringify(c.ids).slice(0, 200), "\n  js", JSON.stringify(ids).slice(0, 200));
    bad++;
  }
  const dec = c.ids.length === 0 ? "" : tok.decode(c.ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  if (dec !== c.text) { if (dbad < 3) console.log("DECODE MISMATCH", JSON.stringify(c.text).slice(0, 80), JSON.stringify(dec).slice(0, 80)); dbad++; }
}
console.log(`tokenizers.js: ${cases.length} cases, ${ntok} tokens, ${bad} encode mismatches, ${dbad} decode mismatches`);
process.exit(bad || dbad ? 1 : 0);
